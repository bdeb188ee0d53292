"""`crw flow next RUN [--wait S] [--json]`: the run's state, steps, slots, spawn
formats and hint (spec, "The owner's commands"; the answer is `engine.next_view`).

It reads the run directory: the journal, the step files and close steps, the lock
files, the role store, the owner's last line in `<state>/flow-bound/<owner>.jsonl`
and agents.max_threads. It writes no row and never the owner's line (CMD-NEXT-16);
it removes a close step's file once it has printed it (CMD-NEXT-15), and it
resumes a run no process holds that goes on, as `crw flow resume RUN --detach`
does (CMD-NEXT-18), waiting for that process's started row. A resume refused, or
whose process stopped before its started row, or the record of such a launch
(`crw.engine.run.launch_record`) while no process holds the run, is the answer's
`launch_refused`: no step of a dead process is handed out. While the files such
a launch stopped on are as it left them (`launch_record.holds_launch`), next
launches no process again: a fault the user must fix is not launched once per
`next`.

A starting run, and a new holder that has not bound the owner's line yet, are
read again up to 15 s whatever --wait says (CMD-NEXT-28, CMD-NEXT-33); the waits
go by a `Clock`, which tests replace.

`--wait S` polls every 10 ms for its first 100 ms, then every 50 ms, up to S
seconds, while the run has no step and goes on, and answers as soon as a step
comes or the state changes (CMD-NEXT-11); between two reads it sleeps on a wake
of the run's step files (`crw.bus.stepwake`), so a step written meanwhile is
read at once, not at the next poll.
"""

from __future__ import annotations

import dataclasses
import itertools
import json as json_module
import logging
import os
import shlex
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from crw.binding.lines import is_segment, owner_file, read_last_line
from crw.bus.inbox import read_reports
from crw.bus.steps import read_bus, remove_close
from crw.bus.stepwake import StepWake
from crw.cli.output import emit
from crw.cli.owner.next_text import human
from crw.cli.owner.store_pairs import store_pairs
from crw.codex_config import max_threads
from crw.engine.owner.next_view import (
    RESUMABLE_STATES,
    STARTING_WINDOW_S,
    NextRead,
    can_do_nothing,
    is_starting,
    needs_ready_nodes,
    next_view,
    should_resume,
)
from crw.engine.run.launch_record import LaunchFailure, holds_launch, read_failure, stamps
from crw.engine.run.locks import (
    RunHeldError,
    held_process_tokens,
    is_held,
    is_launching,
    run_is_live,
)
from crw.engine.run.rundir import RunDir, find_run, resolve_state
from crw.errors import CrwError, InputError
from crw.journal.log import JournalCorruptError, TornTail
from crw.journal.replay import RunState, replay
from crw.journal.snapshot import Fold, fold_on, read_fold
from crw.journal.store import JournalStore
from crw.journal.stores import read_run_journal, store_at
from crw.rawfile import read_bytes, read_from

log = logging.getLogger("crw.next")

POLL = 0.05
"""Seconds between two reads while --wait waits."""
FIRST_POLL = 0.01
FIRST_POLLS = 10
"""The first reads of a wait come every FIRST_POLL: an owner that took its steps
asks again as the run publishes the next ones (a reply's bind, then the call's
end, then the gate), most often within a few ms; a longer wait reads every POLL."""


@dataclass(frozen=True)
class Clock:
    """The clocks next reads and waits by: `monotonic` and `sleep` for its own
    waits, `time_ns` (wall) to tell how long ago a holder took its process lock
    (the lock file's mtime). Tests pass one whose sleep only moves the time on."""

    monotonic: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    time_ns: Callable[[], int] = time.time_ns


SYSTEM_CLOCK = Clock()


def next_command(
    run: str, *, wait: float, state: str | None, json: bool, clock: Clock = SYSTEM_CLOCK
) -> int:
    if wait < 0:
        raise InputError(f"--wait {wait:g} is negative; pass a number of seconds >= 0")
    state_dir = resolve_state(state, os.environ, Path.cwd())
    run_dir = find_run(state_dir, run)
    refs = _refs(run_dir, state_dir, explicit=state is not None)
    reader = _Reader(run_dir, state_dir, refs, clock, wait)
    read = reader.read()
    resumed, reader.refused = _resume(run_dir, state_dir) if should_resume(read) else (None, None)
    if resumed is not None or reader.refused is not None:
        read = reader.read()
    read = _through_start(reader, read, clock, wait)
    read = dataclasses.replace(_wait(reader, read, wait, clock), resumed_pid=resumed)
    view = next_view(read)
    emit(json, view.to_json(), lambda: human(view))  # no human form made for --json
    handed = read.closes if view.state != "starting" else ()  # a starting run shows none
    for close in handed:  # handed out: the owner closes them now (CMD-NEXT-15)
        remove_close(run_dir, close.call, close.attempt, close.agent_id)
    reader.keep_fold()  # its state is read's: kept once the answer is made
    return 0


def _through_start(reader: _Reader, read: NextRead, clock: Clock, wait: float) -> NextRead:
    """Read a starting run again, up to STARTING_WINDOW_S whatever --wait says (a
    longer --wait: up to it), until its process has published its first state and
    bound the owner's line (CMD-NEXT-28, CMD-NEXT-33)."""
    deadline = clock.monotonic() + max(STARTING_WINDOW_S, wait)
    while is_starting(read) and (left := deadline - clock.monotonic()) > 0:
        clock.sleep(min(POLL, left))
        read = reader.read()
    return read


def _refs(run_dir: RunDir, state_dir: Path, *, explicit: bool) -> tuple[str, str]:
    """How the commands of the answer name the run (its id, or its path when it
    lives outside the state directory) and the state directory (when the owner
    passed --state), shell-quoted."""
    under_state = run_dir == RunDir.of(state_dir, run_dir.id)
    run_ref = shlex.quote(run_dir.id if under_state else str(run_dir.root))
    return run_ref, shlex.quote(str(state_dir)) if explicit else ""


class _Reader:
    """Reads the run again and again. Each row is decoded and replayed once: a read
    decodes only what the journal appended since the last one and folds it on into
    the same state (a read's state is the reader's, folded on by the next read);
    a torn tail is warned about on the first read only."""

    def __init__(
        self,
        run_dir: RunDir,
        state_dir: Path,
        refs: tuple[str, str],
        clock: Clock = SYSTEM_CLOCK,
        wait: float = 0.0,
    ) -> None:
        self.run_dir = run_dir
        self.run_ref, self.state_ref = refs
        self.max_threads = max_threads(os.environ)
        self.state_dir = state_dir
        self.clock = clock
        self.wait = wait
        self.owner = _owner(run_dir)
        self.refused: str | None = None
        """Why the resume this command tried did not start, if it did not."""
        self._store_pairs: dict[str, dict[str, str]] | None = None
        self._stamp: tuple[int, int, int] | None = None
        self._run = replay(())
        self._ino, self._fold = _take_fold(run_dir)
        """The journal's fold and its inode (`_folds`)."""

    def read(self) -> NextRead:
        run = self._journal()
        held = run_is_live(self.run_dir)
        tokens = held_process_tokens(self.run_dir)  # a holder takes its own before the run's
        bus = read_bus(self.run_dir)
        owner = self.owner if run.backend == "session" else None
        line, problem = self._owner_line(owner)
        launching = is_held(self.run_dir.start_lock) or is_launching(self.run_dir)
        refused, kept = (None, False) if held or launching or tokens else self._launch_failure()
        return NextRead(
            run=self.run_dir.id,
            rows=(),
            steps=bus.steps,
            closes=bus.closes,
            max_threads=self.max_threads,
            held=held,
            store_pairs=self.store_pairs(run.role_pairs if held else None),
            run_ref=self.run_ref,
            state_ref=self.state_ref,
            launching=launching,
            launch_refused=refused,
            launch_held=kept,
            process_tokens=tokens,
            holder_since=_mtime(self.run_dir.process_lock(run.process))
            if run.process in tokens
            else None,
            now=self.clock.time_ns(),
            step_times=bus.times,
            reported=frozenset((r.call, r.k, r.attempt) for r in read_reports(self.run_dir)),
            ready_nodes=self.ready_nodes(run) if needs_ready_nodes(run) else (),
            owner=owner,
            owner_line=line,
            owner_line_problem=problem,
            wait=self.wait,
            host_waiter=self._host_waiter(run),
            replayed=run,
        )

    def _host_waiter(self, run: RunState) -> tuple[int, str] | None:
        """The process that waits for the host of a run paused host_unavailable;
        read only for such a run (its module stays off next's cold path)."""
        if run.paused_reason != "host_unavailable":
            return None
        from crw.engine.run.host_wait import waiting

        waiter = waiting(self.run_dir)
        return (waiter.pid, waiter.until) if waiter is not None else None

    def _launch_failure(self) -> tuple[str | None, bool]:
        """Why no process could start for a run none holds (the resume this command
        tried, else the last launch that stopped before its started row), and
        whether that launch holds the next one back: none of the files it could
        have stopped on changed since (`holds_launch`)."""
        failure = read_failure(self.run_dir)
        kept = failure is not None and holds_launch(failure, stamps(self.run_dir, self.state_dir))
        if self.refused is not None:
            return self.refused, kept
        return (failure.told() if failure is not None else None), kept

    def _owner_line(self, owner: str | None) -> tuple[dict[str, Any] | None, str | None]:
        """The owner's last line, or why it cannot be read (next only reads it)."""
        if not owner:
            return None, None
        if not is_segment(owner):
            return None, f"the owner id {owner!r} is not a file name"
        path = owner_file(self.state_dir, owner)
        try:
            last = read_last_line(path)
        except OSError as err:
            return None, f"{path}: {err.strerror or err}"
        return last.line, last.untrusted or last.unreadable

    def ready_nodes(self, run: RunState) -> tuple[str, ...] | None:
        """The nodes the gate would admit now (None: the workflow cannot be read)."""
        from crw.engine.calls.gate import ready
        from crw.engine.config.workflow import load_workflow
        from crw.engine.run.runspec import read_run_spec

        try:
            spec = read_run_spec(self.run_dir.run_json)
            with spec.file_limit():
                workflow = load_workflow(Path(spec.workflow.path))
        except (CrwError, OSError) as err:
            log.warning("run %s: cannot read its workflow: %s", self.run_dir.id, err)
            return None
        ended = {c.node: c.state for c in run.calls.values() if c.node}
        done = {node for node, state in ended.items() if state == "completed"}
        stopped = set(ended) - done
        return tuple(node.id for node in ready(workflow, done, set(), max(spec.pool, 1), stopped))

    def store_pairs(self, pinned: Mapping[str, Any] | None) -> dict[str, dict[str, str]]:
        """The role store's pairs, read once: the spawn formats of a run no process
        holds, and what a holder's pins are compared with (CMD-NEXT-37)."""
        if self._store_pairs is None:
            self._store_pairs = store_pairs(self.state_dir, pinned)
        return self._store_pairs

    def _journal(self) -> RunState:
        """The journal's state, decoding and folding only what it appended since
        the last read: this command's last, or, at its first, the last of the
        `next` before it in this process (`kept_fold`); a process's first read
        starts from the run's replay snapshot. A torn tail is warned about at the
        first read only, unless a process holds the run."""
        path = self.run_dir.journal
        store = store_at(path)
        if store.wake_file is None:  # no file to stat: fold on what the store appended
            return self._fold_store(store)
        try:
            stat = path.stat()
        except FileNotFoundError:
            return self._run
        stamp = (stat.st_ino, stat.st_size, stat.st_mtime_ns)
        if stamp == self._stamp:
            return self._run
        fold, first = self._fold, self._stamp is None
        if fold is None or stat.st_ino != self._ino or stat.st_size < fold.end:
            fold = self._cold()
        else:
            try:
                start = fold.end
                torn = fold_on(path, fold, read_from(path, start)).torn  # raw: no buffered reader
            except JournalCorruptError:
                if not first:
                    raise
                fold = self._cold()  # reported with the whole journal's offsets, as ever
            else:
                if first and torn is not None and not is_held(self.run_dir.run_lock):
                    log.warning("%s", TornTail(path, start + torn.offset, torn.reason).message)
        self._fold, self._stamp, self._ino = fold, stamp, stat.st_ino
        self._run = fold.state
        return self._run

    def _fold_store(self, store: JournalStore) -> RunState:
        """`_journal` for a store that is no file: the rows after the fold's end."""
        if self._fold is None:
            self._fold = self._cold()
        else:
            fold_on(store.path, self._fold, store.read_from(self._fold.end))
        self._run = self._fold.state
        return self._run

    def _cold(self) -> Fold:
        return read_fold(self.run_dir.journal, live=is_held(self.run_dir.run_lock))[0]

    def keep_fold(self) -> None:
        """Keep this reader's fold of the journal for the process's next `next` of
        the run (`_folds`)."""
        if self._fold is not None:
            with _folds_lock:
                _folds[str(self.run_dir.journal)] = (self._ino, self._fold)
                while len(_folds) > KEPT_FOLDS:
                    del _folds[next(iter(_folds))]


KEPT_FOLDS = 4
"""The most runs whose journal folds a process keeps between its `next` commands."""
_folds: dict[str, tuple[int, Fold]] = {}
"""The fold of each run's journal (by its path) the last `next` of this process
left, with the journal's inode. A command takes it (no two share one: a fold is
folded on in place) and puts it back when done. The CLI runs `next` once a
process; an owner that calls `next_command` again and again (the bench's, the
scripted owner) decodes and replays only the rows appended since its last call,
not the snapshot and the rows after it each time: the journal is append-only,
and a journal replaced (another inode) or cut short is read cold again."""
_folds_lock = threading.Lock()


def _take_fold(run_dir: RunDir) -> tuple[int, Fold | None]:
    with _folds_lock:
        return _folds.pop(str(run_dir.journal), (0, None))


def _owner(run_dir: RunDir) -> str | None:
    """The run's owner thread as run.json names it (read as plain JSON: the spec's
    model is pydantic), or None."""
    try:
        text = read_bytes(run_dir.run_json).decode("utf-8")  # raw: four syscalls, not nine
        owner = json_module.loads(text).get("owner")
    except (OSError, ValueError, AttributeError):
        return None
    return owner if isinstance(owner, str) and owner else None


def _mtime(path: Path) -> int | None:
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return None


class _Settled(Exception):
    """The run no longer needs the resume next was about to start."""


def _resume(run_dir: RunDir, state_dir: Path) -> tuple[int | None, str | None]:
    """Resume the run as `crw flow resume RUN --detach` does, under its launch lock,
    and wait for the child's started row (up to STARTING_WINDOW_S); the child's
    pid, or None when another command is launching it (the run is then starting),
    and why the resume did not start when it did not (warned)."""
    from crw.cli.run.resume import check_resumable
    from crw.engine.run.launch import launch_once
    from crw.engine.run.runspec import read_run_spec

    def check() -> None:
        check_resumable(run_dir, spec)
        if replay(read_run_journal(run_dir.journal).rows).state not in RESUMABLE_STATES:
            raise _Settled  # a process that raced this launch paused the run meanwhile

    try:
        spec = read_run_spec(run_dir.run_json)
        launch = launch_once(run_dir, state_dir, spec.env_overrides(), os.environ, check)
    except (RunHeldError, _Settled):
        return None, None  # another launch or process won the race: next reads it as it is
    except (CrwError, OSError) as err:
        log.warning("run %s: its resume did not start: %s", run_dir.id, err)
        return None, str(err)
    came = launch.settle(STARTING_WINDOW_S)
    if isinstance(came, LaunchFailure):
        log.warning("run %s: its resume did not start: %s", run_dir.id, came.reason)
        return None, came.reason
    return launch.pid, None


def _wait(reader: _Reader, first: NextRead, wait: float, clock: Clock) -> NextRead:
    """Read again, every FIRST_POLL seconds FIRST_POLLS times, then every POLL, up
    to `wait`, while the run goes on without a step, and at once when a step or
    close file is written meanwhile (`_step_wake`); return the first read with a
    step or another state. A starting run, or one that can do nothing, is
    answered at once."""
    state = _state(first)
    if wait <= 0 or first.steps or first.closes or state not in RESUMABLE_STATES:
        return first
    if first.launch_refused is not None:  # nothing comes until the user fixes it
        return first
    if can_do_nothing(first):
        return first
    deadline = clock.monotonic() + wait
    read = first
    with _step_wake(reader.run_dir, clock) as wake:
        for reads in itertools.count():
            if (left := deadline - clock.monotonic()) <= 0:
                break
            pause = min(FIRST_POLL if reads < FIRST_POLLS else POLL, left)
            if wake is None:
                clock.sleep(pause)
            else:  # the pause, or less: a step or close file renamed in ends it
                wake.wait(pause)
            read = reader.read()
            if read.steps or read.closes or _state(read) != state:
                break
    return read


@contextmanager
def _step_wake(run: RunDir, clock: Clock) -> Iterator[StepWake | None]:
    """A wake for the run's step files while a wait goes on (`crw.bus.stepwake`);
    None under a clock of a test's (its sleeps move its own time), or where
    inotify is not."""
    wake = StepWake.open(run) if clock is SYSTEM_CLOCK else None
    if wake is None:
        yield None
        return
    with wake:
        yield wake


def _state(read: NextRead) -> str:
    return "starting" if is_starting(read) else read.run_state.state
