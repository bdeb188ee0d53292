"""The decisions of `crw flow next` about the run's process (pure): whether the run
is starting, whether next resumes it, and whether it can do anything at all.

See `crw.engine.next_view` for what each reading means; these take its `NextRead`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from crw.journal.replay import TERMINAL_ROWS, RunState

if TYPE_CHECKING:
    from crw.engine.next_view import NextRead

RESUMABLE_STATES = frozenset({"running", "waiting_session", "waiting_decision"})
"""States of a run that goes on: one no process holds is resumed (CMD-NEXT-18, -20)."""
STARTING_WINDOW_S = 15.0
"""How long next reads a starting run again, whatever --wait says (CMD-NEXT-28)."""

StepKey = tuple[str, int, int]
"""A step's call, k and attempt."""


def should_resume(read: NextRead) -> bool:
    """A run no process holds and none is launched for, that goes on and has work
    (CMD-NEXT-18, CMD-NEXT-20, CMD-NEXT-30)."""
    if read.held or read.launching:
        return False
    return read.run_state.state in RESUMABLE_STATES and not can_do_nothing(read)


def is_starting(read: NextRead) -> bool:
    """Whether the run's process is coming up (CMD-NEXT-24..26), or has not yet
    passed over the steps an earlier process left (see the module docstring)."""
    run = read.run_state
    if run.state == "ended":
        return False
    if read.launching:
        return True
    if not read.held:
        return False
    if run.processes == 0:
        return True
    if run.process is None:
        return bool(read.process_tokens)
    return run.process not in read.process_tokens or bool(stale_steps(read))


def stale_steps(read: NextRead) -> list[StepKey]:
    """The step files the holder has not passed over: older than its process lock."""
    if read.holder_since is None:
        return []
    return [key for key, mtime in read.step_times.items() if mtime < read.holder_since]


def open_calls(run: RunState) -> list[str]:
    """The calls the rows leave without a terminal row: a process goes on with them."""
    return [call.call for call in run.calls.values() if call.state not in TERMINAL_ROWS]


def needs_ready_nodes(run: RunState) -> bool:
    """Whether only the workflow can tell if the run has work: it waits on a
    decision and has no open call."""
    return run.state == "waiting_decision" and not open_calls(run)


def can_do_nothing(read: NextRead) -> bool:
    """A run waiting on a decision whose every call ended, held or not, with no node
    the gate would admit: a process for it would write its started row and exit."""
    return (
        needs_ready_nodes(read.run_state) and read.ready_nodes is not None and not read.ready_nodes
    )


def answer_choices(backend: str | None) -> tuple[str, ...]:
    """The answers a held call of a run on `backend` takes (`crw flow answer`):
    retry, skip, abort, and restart on the session backend (an app-server run
    refuses a restart)."""
    return ("retry", "skip", "abort", *(("restart",) if backend == "session" else ()))
