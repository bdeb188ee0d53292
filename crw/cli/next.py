"""`crw flow next RUN [--wait S] [--json]`: the run's state, steps, slots, spawn
formats and hint (spec, "The owner's commands"; the answer is `engine.next_view`).

It reads the run directory: the journal, the step files and close steps, the lock
files, the role store and agents.max_threads. It writes no row and never the
owner's line (CMD-NEXT-16); it removes a close step's file once it has printed it
(CMD-NEXT-15), and it resumes a run no process holds that goes on, as
`crw flow resume RUN --detach` does (CMD-NEXT-18).

`--wait S` polls every 50 ms, up to S seconds, while the run has no step and
goes on, and answers as soon as a step comes or the state changes (CMD-NEXT-11).
"""

from __future__ import annotations

import dataclasses
import json as json_module
import logging
import os
import shlex
import time
from pathlib import Path
from typing import Any

from crw.bus.steps import list_closes, list_steps, remove_close
from crw.cli.output import emit
from crw.engine.codex_config import max_threads
from crw.engine.locks import run_is_live
from crw.engine.next_view import (
    RESUMABLE_STATES,
    NextRead,
    NextView,
    next_view,
    should_resume,
)
from crw.engine.rundir import RunDir, find_run, resolve_state
from crw.errors import CrwError, InputError
from crw.journal.log import decode, read_journal
from crw.journal.replay import Row, replay

log = logging.getLogger("crw.next")

POLL = 0.05
"""Seconds between two reads while --wait waits."""


def next_command(run: str, *, wait: float, state: str | None, json: bool) -> int:
    if wait < 0:
        raise InputError(f"--wait {wait:g} is negative; pass a number of seconds >= 0")
    state_dir = resolve_state(state, os.environ, Path.cwd())
    run_dir = find_run(state_dir, run)
    refs = _refs(run_dir, state_dir, explicit=state is not None)
    reader = _Reader(run_dir, state_dir, refs)
    read = reader.read()
    if should_resume(read):
        read = dataclasses.replace(read, resumed_pid=_resume(run_dir, state_dir))
    read = _wait(reader, read, wait)
    view = next_view(read)
    emit(json, view.to_json(), human(view))
    for close in read.closes:  # handed out: the owner closes them now (CMD-NEXT-15)
        remove_close(run_dir, close.call, close.attempt, close.agent_id)
    return 0


def _refs(run_dir: RunDir, state_dir: Path, *, explicit: bool) -> tuple[str, str]:
    """How the commands of the answer name the run (its id, or its path when it
    lives outside the state directory) and the state directory (when the owner
    passed --state), shell-quoted."""
    under_state = run_dir == RunDir.of(state_dir, run_dir.id)
    run_ref = shlex.quote(run_dir.id if under_state else str(run_dir.root))
    return run_ref, shlex.quote(str(state_dir)) if explicit else ""


class _Reader:
    """Reads the run again and again; the journal is parsed only when it changed,
    and a torn tail is warned about on the first read only."""

    def __init__(self, run_dir: RunDir, state_dir: Path, refs: tuple[str, str]) -> None:
        self.run_dir = run_dir
        self.run_ref, self.state_ref = refs
        self.max_threads = max_threads(os.environ)
        self.state_dir = state_dir
        self._store_pairs: dict[str, dict[str, str]] | None = None
        self._stamp: tuple[int, int, int] | None = None
        self._rows: list[Row] = []

    def read(self) -> NextRead:
        rows = self._journal_rows()
        held = run_is_live(self.run_dir)
        pinned = held and replay(rows).role_pairs is not None
        return NextRead(
            run=self.run_dir.id,
            rows=rows,
            steps=list_steps(self.run_dir),
            closes=list_closes(self.run_dir),
            max_threads=self.max_threads,
            held=held,
            store_pairs={} if pinned else self.store_pairs(),
            run_ref=self.run_ref,
            state_ref=self.state_ref,
        )

    def store_pairs(self) -> dict[str, dict[str, str]]:
        """The role store's pairs, read once and only when the answer needs them: a
        holder's started row pins the pairs of a live run."""
        if self._store_pairs is None:
            self._store_pairs = _store_pairs(self.state_dir)
        return self._store_pairs

    def _journal_rows(self) -> list[Row]:
        path = self.run_dir.journal
        try:
            stat = path.stat()
        except FileNotFoundError:
            return []
        stamp = (stat.st_ino, stat.st_size, stat.st_mtime_ns)
        if stamp != self._stamp:
            first = self._stamp is None
            self._rows = list(
                read_journal(path).rows if first else decode(path.read_bytes(), path).rows
            )
            self._stamp = stamp
        return self._rows


def _store_pairs(state_dir: Path) -> dict[str, dict[str, str]]:
    """The role store's pairs; a store that cannot be read is warned about and
    answers every role undecided (a resume then refuses it itself)."""
    # Imported here: the role store is pydantic, and next's cold start must not pay
    # for it unless it reads the store.
    from crw.engine.roles import RoleTable, load_roles

    try:
        return load_roles(state_dir / "roles.toml").role_pairs()
    except CrwError as err:
        log.warning("%s", err)
        return RoleTable.undecided().role_pairs()


def _resume(run_dir: RunDir, state_dir: Path) -> int | None:
    """Resume the run as `crw flow resume RUN --detach` does; the child's pid, or
    None (warned) when the resume did not start."""
    from crw.cli.resume import check_resumable
    from crw.engine.launch import launch_run_process
    from crw.engine.runspec import read_run_spec

    try:
        spec = read_run_spec(run_dir.run_json)
        check_resumable(run_dir, spec)
        child = launch_run_process(run_dir, state_dir, spec.env_overrides(), os.environ)
    except (CrwError, OSError) as err:
        log.warning("run %s: its resume did not start: %s", run_dir.id, err)
        return None
    return child.pid


def _wait(reader: _Reader, first: NextRead, wait: float) -> NextRead:
    """Read again every POLL seconds, up to `wait`, while the run goes on without a
    step; return the first read with a step or another state."""
    state = replay(first.rows).state
    if wait <= 0 or first.steps or first.closes or state not in RESUMABLE_STATES:
        return first
    deadline = time.monotonic() + wait
    read = first
    while (left := deadline - time.monotonic()) > 0:
        time.sleep(min(POLL, left))
        read = dataclasses.replace(reader.read(), resumed_pid=first.resumed_pid)
        if read.steps or read.closes or replay(read.rows).state != state:
            break
    return read


def human(view: NextView) -> str:
    """The state line, each step with its host call, the slots, the spawn formats
    and the hint."""
    head = f"run {view.run}: {view.state}"
    if view.state == "ended":
        head += f" ({view.ended_status})"
    lines = [head]
    if not view.steps:
        lines.append("  no step")
    for step in view.steps:
        lines += _step_lines(step)
    slots = view.slots
    agents = f": {', '.join(slots.agents)}" if slots.agents else ""
    lines.append(f"  slots: {slots.open} of {slots.limit} open{agents}")
    if view.spawn_formats:
        lines.append("  spawn formats:")
        lines += [f"    {f['role']:<12} {f['format']}" for f in view.spawn_formats]
    lines.append(f"hint: {view.hint}")
    return "\n".join(lines)


def _step_lines(step: dict[str, Any]) -> list[str]:
    call = step["host_call"]
    arguments = json_module.dumps(call["arguments"], ensure_ascii=False)
    if step["action"] == "close":
        title = f"  close {step['call']} a{step['attempt']} {step['agent_id']}"
    else:
        title = f"  step {step['op']}-a{step['attempt']} {step['action']} ({step['role']})"
    lines = [title, f"    {call['tool']} {arguments}"]
    if "then" in call:
        lines.append(f"    then: {call['then']}")
    return lines
