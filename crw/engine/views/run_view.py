"""What a run and each of its calls come to: the records `status` and `list` show.

Pure: a `RunState` in (`crw.journal.replay.replay(rows)` of a run's rows, or
`replay_journal`'s), records out. A call's record
is its node, role, state, newest attempt, turns, tokens, when it started (its
prepared row's `at`) and ended (its newest terminal row's `at`), how long it took
(until `now` for a call not ended), and the held, null_model or lost reason. The
run's outcome is its state with the reason: a paused run's reason, an ended run's
status and the nodes that did not complete, a run waiting on a decision's held
calls. How many calls are done of all: `crw.engine.views.counts`. Standard
library only: `status --json` starts cold and fast.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from crw.journal.replay import RunState


@dataclass(slots=True)
class CallView:
    """One call as the rows leave it, with its times."""

    call: str
    node: str | None
    role: str | None
    state: str
    attempt: int
    turns: int
    tokens: dict[str, int]
    started_at: str | None
    ended_at: str | None
    seconds: float | None
    """From started_at to ended_at, or to `now` for a call not ended; None when
    a stamp is missing."""
    reason: str | None
    """A held, null_model or lost call's reason."""
    error: str | None
    by: str | None
    """The call that runs its node again (a restart)."""
    result: Any


@dataclass(frozen=True)
class Outcome:
    """The run's state and why: `reason` is a paused run's (`write_failed: FILE:
    ERROR`), an ended run's status (completed, failed, aborted, cancelled);
    `unfinished` an ended run's nodes that did not complete, with their end
    (null_model, held, unrun, skipped); `held` the held calls of a run waiting on
    a decision."""

    state: str
    reason: str | None
    unfinished: dict[str, str]
    held: list[str]


def parse_at(stamp: str | None) -> datetime | None:
    """A row's `at` (`2026-11-29T00:00:00.000000Z`) as an aware datetime."""
    if not stamp:
        return None
    try:
        return datetime.fromisoformat(stamp)
    except ValueError:
        return None


def seconds_between(start: str | None, end: str | None, now: datetime | None) -> float | None:
    """Seconds from `start` to `end` (or to `now` when `end` is None). Called once a
    call (10,000 in a big run's `status --json`): the parses are inline."""
    parse = datetime.fromisoformat
    try:
        began = parse(start) if start else None
        ended = parse(end) if end else now
    except ValueError:
        return None
    if began is None or ended is None:
        return None
    seconds = (ended - began).total_seconds()
    return seconds if seconds > 0 else 0.0


def call_views(run: RunState, now: datetime | None = None) -> list[CallView]:
    """Every call of `run`, in the order the run admitted them."""
    return [
        CallView(
            call=call.call,
            node=call.node,
            role=call.role,
            state=call.state,
            attempt=call.attempt,
            turns=call.turns,
            tokens=call.tokens,
            started_at=call.started_at,
            ended_at=call.ended_at,
            seconds=seconds_between(call.started_at, call.ended_at, now),
            reason=call.reason,
            error=call.error,
            by=call.by,
            result=call.result,
        )
        for call in run.calls.values()
    ]


def outcome(run: RunState) -> Outcome:
    """The run's state with its reason (see `Outcome`)."""
    reason: str | None = None
    unfinished: dict[str, str] = {}
    if run.state == "paused":
        reason = run.paused_why
    elif run.state == "ended":
        reason = run.ended_status
        ends = run.ended_state if isinstance(run.ended_state, dict) else {}
        unfinished = {node: str(end) for node, end in ends.items() if end != "completed"}
    held = []
    if run.state == "waiting_decision":  # a paused run's held calls go on when it resumes
        held = [call.call for call in run.calls.values() if call.state == "held"]
    return Outcome(run.state, reason, unfinished, held)
