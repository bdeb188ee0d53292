"""The pages' live updates as Server-Sent Events, woken by the journals.

A run's page follows its journal as `show --follow` does: the same inotify wake
(`crw.cli.read.follow.RunWake`, made before the first read so no append is
missed), awaited on its descriptor instead of blocking; each wake reads only the
rows appended (`JournalTail`, from the end of the replay snapshot's read) and
sends the calls they changed. The runs list watches the state's flow directory
(a run made or removed) and each run's directory with the same mask and names.
Nothing is polled: SAFETY_WAKE bounds the wait after a lost event, and events
are sent at most every GAP seconds (a busy run's appends coalesce).
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import trio
from inotify_simple import INotify
from inotify_simple import flags as inotify_flags

from crw.bus.dirwatch import inotify_simple
from crw.cli.read.follow import SAFETY_WAKE, JournalTail, RunWake
from crw.cli.read.run_spec import spec_json, workflow_file, workflow_plan
from crw.cli.read.status import call_entry
from crw.engine.run.locks import run_is_live
from crw.engine.run.rundir import FLOW, RunDir, list_runs
from crw.engine.views.counts import counts, reviews, shown_state
from crw.journal.log import JournalCorruptError
from crw.journal.snapshot import replay_journal
from crw.web.views import call_cells, row_item, state_ref

GAP = 0.25
"""Seconds at least between two events of a run's stream."""
RUNS_GAP = 1.0
"""Seconds at least between two events of the runs list's stream: each makes the
page fetch its table again (which reads again the runs that changed)."""


def event(name: str, data: Any) -> str:
    """One Server-Sent Event: its name and its data as one line of JSON."""
    return f"event: {name}\ndata: {json.dumps(data)}\n\n"


async def _woken(fd: int) -> None:
    """Return once `fd` is readable, or after SAFETY_WAKE seconds."""
    with trio.move_on_after(SAFETY_WAKE):
        await trio.lowlevel.wait_readable(fd)


async def run_events(run: RunDir, state_dir: Path) -> AsyncGenerator[str]:
    """A run's events: `calls` (the entries of the calls its new rows name, as
    status shows them), `rows` (the new rows' lines, as show prints them) and
    `run` (its state, progress and whether a process holds it) when they change."""
    ref = state_ref(state_dir)
    plan = workflow_plan(workflow_file(spec_json(run)))  # as status counts a run not ended
    with RunWake(run) as wake:
        state, read = replay_journal(run.journal, live=True)
        tail = JournalTail(run.journal, offset=read.end, last_seq=read.last_seq, state=state)
        shown: tuple[str, bool, str] | None = None
        while True:
            live = run_is_live(run)
            try:
                rows = tail.read()
            except JournalCorruptError:
                yield event("run", {"state": "corrupt", "live": live, "progress": ""})
                return
            if rows:
                named = {row["call"] for row in rows if isinstance(row.get("call"), str)}
                yield event("calls", _calls(tail, named, run.id, ref))
                yield event("rows", [row_item(row) for row in rows])
            ended = tail.state.state == "ended"
            progress = counts(tail.state, {} if ended else plan, live=live).to_json()
            now = (shown_state(tail.state.state, live), live, json.dumps(progress))
            if now != shown:
                shown = now
                yield event("run", {"state": now[0], "live": live, "progress": progress})
            await trio.sleep(GAP)
            await _woken(wake.fileno())
            wake.woke()


def _calls(tail: JournalTail, named: set[str], run_id: str, ref: str) -> list[dict[str, Any]]:
    state = tail.state
    now = datetime.now(UTC)
    judged = reviews(state.calls.values())
    return [
        call_cells(call_entry(state.calls[call], now, run_id, ref, state, False, judged.get(call)))
        for call in sorted(named)
        if call in state.calls
    ]


class StateWake:
    """An inotify watch on a state's flow directory and each run's directory in
    it: `woke` says whether a run was made or removed, or a journal grew or a
    lock was let go (RunWake's names)."""

    def __init__(self, state_dir: Path) -> None:
        self._flow = state_dir / FLOW
        sample = RunDir.of(state_dir, "-")
        self._names = {sample.journal.name, sample.run_lock.name, sample.start_lock.name}
        inotify_simple()  # its libc loaded without find_library's child process
        self._inotify = INotify()
        self._watched: set[str] = set()
        self.rescan()

    def fileno(self) -> int:
        return int(self._inotify.fileno())

    def close(self) -> None:
        self._inotify.close()

    def rescan(self) -> None:
        """Watch the flow directory and every run's directory not watched yet."""
        dirs = inotify_flags.CREATE | inotify_flags.MOVED_TO | inotify_flags.DELETE
        try:
            if "" not in self._watched:
                self._inotify.add_watch(self._flow, dirs | inotify_flags.MOVED_FROM)
                self._watched.add("")
        except OSError:
            return  # no flow directory yet: the safety wake rescans
        for run_id in list_runs(self._flow.parent):
            if run_id not in self._watched:
                try:
                    self._inotify.add_watch(self._flow / run_id, RunWake.MASK | RunWake.CREATE)
                except OSError:
                    continue
                self._watched.add(run_id)

    def woke(self) -> bool:
        events = self._inotify.read(timeout=0)
        new_dir = any(event.mask & inotify_flags.ISDIR for event in events)
        if new_dir:
            self.rescan()
        return new_dir or any(
            event.name in self._names or event.mask & inotify_flags.Q_OVERFLOW for event in events
        )


async def runs_events(state_dir: Path) -> AsyncGenerator[str]:
    """The runs list's events: `runs` each time a run was made or removed, or a
    run's journal or locks changed (the page then fetches its table again)."""
    wake = StateWake(state_dir)
    try:
        while True:
            await trio.sleep(RUNS_GAP)
            await _woken(wake.fileno())
            wake.rescan()
            if wake.woke():
                yield event("runs", {})
    finally:
        wake.close()
