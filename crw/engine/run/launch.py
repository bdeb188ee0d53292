"""The detached launch of a run's process (`crw flow _run RUN`).

Every detached launch gives the process the caller's environment with the
variables the run spec records in place (env, today TMPDIR; exactly one entry
each), so a run relaunched from another shell runs below the TMPDIR its start
recorded. The child is a session leader with no terminal, its stdin closed and its
output appended to the run's log, so it outlives the command that started it and
never writes to that command's stdout.

A launch hands the child the lock it launched under (the start's start lock, a
resume's launch lock, `crw.engine.run.locks`): the child holds it until it holds the
run lock, so no second launch of the run starts meanwhile, however long the child
takes to come up or whenever the launcher exits.

A resume's launcher then waits for the child's started row (`Launch.settle`): a
child that exits without one (its workflow changed since the run started, it
crashed on the way up) did not resume the run, and the launcher says so with the
line the child wrote to the run's log, and records it (`launch_record`) for
`status` and `next` to show while no process holds the run.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from crw import detach
from crw.clock import system_clock
from crw.detach import Detached
from crw.engine.run.launch_record import LaunchFailure, record_failure, stamps
from crw.engine.run.locks import HandedLock, handed_env, launch_lock
from crw.engine.run.rundir import RunDir
from crw.engine.run.tmploc import recorded_problem
from crw.errors import RefusedError
from crw.journal.log import JournalCorruptError, decode
from crw.journal.snapshot import read_fold
from crw.journal.stores import store_at
from crw.private import open_file

ERROR_PREFIX = "crw: error: "
"""How a crw process starts the one line of the error it exits with."""
SETTLE_POLL = 0.01
"""Seconds between two looks at a launched child that has not started yet."""


def launch_env(environ: Mapping[str, str], overrides: Mapping[str, str]) -> dict[str, str]:
    """The caller's environment with the recorded variables in place."""
    env = {key: value for key, value in environ.items() if key not in overrides}
    env.update(overrides)
    return env


def launch_run_process(
    run: RunDir,
    state: Path,
    overrides: Mapping[str, str],
    environ: Mapping[str, str],
    handed: HandedLock,
) -> Detached:
    """Start `crw flow _run` for `run`, detached, handing it `handed`; returns the
    child (its pid). The caller then closes its own descriptor of `handed`."""
    log = open_file(run.log, os.O_WRONLY | os.O_APPEND)  # 0600 if gone
    try:
        child = detach.start_crw(
            ["flow", "_run", run.root.name, "--state", str(state)],
            out=log,
            env=launch_env(environ, overrides) | handed_env([handed]),
            cwd=os.getcwd(),
            pass_fds=(handed.fd,),
        )
    finally:
        os.close(log)
    handed.name_holder(child.pid)
    return child


@dataclass(frozen=True)
class Launch:
    """A launched run process of `run` (under `state`), and where the run's journal
    (its whole batches: `journal_end`, `last_seq`) and log ended just before it was
    launched."""

    run: RunDir
    state: Path
    child: Detached
    journal_end: int
    last_seq: int
    log_size: int

    @property
    def pid(self) -> int:
        return self.child.pid

    def settle(self, timeout: float) -> Literal["started", "coming_up"] | LaunchFailure:
        """Wait up to `timeout` seconds for the child's started row: "started" once
        it is there, "coming_up" when the child still lives without one, or the
        failure (recorded in the run's directory) when the child exited without
        one."""
        deadline = time.monotonic() + timeout
        while not self._started():
            status = self.child.poll()
            if status is not None:
                if self._started():  # it started, then stopped (a run that paused at once)
                    break
                # The files as the child left them (a failed append is cut back);
                # none for a child a signal killed: nothing of the run stopped it.
                files = stamps(self.run, self.state) if status > 0 else None
                failure = LaunchFailure(self.pid, self._reason(status), system_clock(), files)
                record_failure(self.run, failure)
                return failure
            if time.monotonic() >= deadline:
                return "coming_up"
            time.sleep(SETTLE_POLL)
        return "started"

    def _started(self) -> bool:
        """Whether the journal holds the child's started row after the mark."""
        try:
            data = store_at(self.run.journal).read_from(self.journal_end)
            rows = decode(data, self.run.journal, after=self.last_seq).rows
        except (OSError, JournalCorruptError):
            return False  # the child finds the damage itself, and says so
        return any(row.get("row") == "started" and row.get("pid") == self.pid for row in rows)

    def _reason(self, status: int) -> str:
        """The error line the child wrote to the run's log, or what is known."""
        try:
            with self.run.log.open("rb") as file:
                file.seek(self.log_size)
                lines = file.read().decode("utf-8", "replace").splitlines()
        except OSError:
            lines = []
        errors = [line[len(ERROR_PREFIX) :] for line in lines if line.startswith(ERROR_PREFIX)]
        if errors:
            return errors[-1].strip()
        return f"its process exited with status {status} before its started row; see {self.run.log}"


def launch_once(
    run: RunDir,
    state: Path,
    overrides: Mapping[str, str],
    environ: Mapping[str, str],
    check: Callable[[], None],
) -> Launch:
    """Launch the run's process under the run's launch lock: at most one launch at a
    time; `Launch.settle` then waits for its started row. `check` refuses a launch
    that must not happen (a run a process holds, one that ended); it runs under the
    lock, so it sees what a launch that raced this one left: its process holds the
    run lock before it lets the launch lock go.

    A recorded env that cannot be put in place (its TMPDIR missing, not a directory
    or not writable) refuses the launch before the lock or anything else of the run.

    Raises:
        RefusedError: the recorded TMPDIR is unusable (the reason names it).
        RunHeldError: another command is launching the run's process.
        CrwError: what `check` raises.
    """
    problem = recorded_problem(overrides)
    if problem is not None:
        raise RefusedError(
            f"run {run.id}'s process cannot be launched: {problem}, then resume the run"
        )
    with launch_lock(run) as lock:
        check()
        fold, _read = read_fold(run.journal, live=True)
        log_size = run.log.stat().st_size if run.log.exists() else 0
        child = launch_run_process(run, state, overrides, environ, lock)
        return Launch(run, state, child, fold.end, fold.state.last_seq, log_size)
