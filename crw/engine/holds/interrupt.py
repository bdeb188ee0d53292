"""The interrupt decisions: a pause, a cancellation or a deadline reaching a call.

Pure (a call's rows and host snapshots in, rows and actions out); the session
call actor acts on them (`crw.actors.session_interrupt`). The spec's harvest:

- a bound turn is interrupted: `interrupt_requested` (reason, op, attempt,
  turn_id) is durable before the interrupt is sent (HARV-35), the thread is read
  until it is no longer active, and only then is the call held (HARV-31);
- a step whose subagent is known and not bound yet (a send_input, an adopted
  spawn) first has the turn that subagent started for it bound (turn_started),
  so the rows name the turn the interrupt reaches (HARV-33);
- a call that waited for a dispatch retracts its step (HARV-32); a spawn step no
  subagent was bound to has no turn to interrupt, and none is sent (HARV-34).

An intent goes with its turn only (HARV-36..42): a resumed process applies an
interrupt_requested row to the turn the rows bound to that row's step and
attempt, and to no other; the comparison is made where the outcome is read.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from crw.engine.calls.session_progress import CallProgress
from crw.engine.held_reasons import CANCELLED as CANCELLED
from crw.engine.held_reasons import DEADLINE as DEADLINE
from crw.engine.held_reasons import PAUSED as PAUSED
from crw.engine.held_reasons import held_by_pause as held_by_pause
from crw.engine.steps.bind import find_marker_turn, marker_turn_started
from crw.host.protocol import Thread
from crw.journal.replay import TERMINAL_ROWS, RunState
from crw.journal.rows import (
    Cancelled,
    Ended,
    Held,
    InterruptRequested,
    Paused,
    RowModel,
    StepPublished,
    Tokens,
    TurnStarted,
)

Row = Mapping[str, Any]


@dataclass(frozen=True)
class Plan:
    """What an interrupt does to a call as its rows leave it.

    kind:
        interrupt: a turn is bound (`thread_id`, `turn_id`): request, send, read.
        look_up: the step's subagent is known (`thread_id`) and not bound: bind
            the turn it started for the step first, if it started one.
        retract: no subagent bound (a spawn step waiting for its dispatch, or no
            step at all): retract the step, send nothing.
    """

    kind: Literal["interrupt", "look_up", "retract"]
    step: StepPublished | None = None
    thread_id: str | None = None
    turn_id: str | None = None


def plan(state: CallProgress) -> Plan:
    """The interrupt of a call whose rows are folded into `state`."""
    if state.step is None:
        return Plan("retract")
    step = StepPublished.model_validate(dict(state.step))
    bound = state.bound_thread_id
    if state.turn is not None:
        thread_id = step.agent_id if step.action == "send_input" else bound
        return Plan("interrupt", step, thread_id, str(state.turn["turn_id"]))
    known = step.agent_id if step.action == "send_input" else bound
    if known:
        return Plan("look_up", step, known)
    return Plan("retract", step)


def turn_of_known(step: StepPublished, thread: Thread) -> TurnStarted | None:
    """The turn_started row of the turn a known subagent started for `step` (its
    marker turn on `thread`), or None when it started none (the owner did not
    take the step: nothing to interrupt, HARV-41)."""
    turn = find_marker_turn(step.marker or "", thread)
    return None if turn is None else marker_turn_started(step, turn)


def requested(
    reason: str, step: StepPublished, turn_id: str, error: str | None = None
) -> InterruptRequested:
    """The intent, committed before the interrupt is sent (ROWS-6, HARV-35);
    `error`, the held row's words when they are not the reason's own."""
    return InterruptRequested(
        call=step.call,
        reason=reason,
        op=step.op,
        attempt=step.attempt,
        turn_id=turn_id,
        error=error,
    )


def settled(thread: Thread, turn_id: str) -> bool:
    """Whether the interrupted turn is over: the thread is no longer active and
    the turn no longer in progress (HARV-31)."""
    turn = next((t for t in thread.turns if t.id == turn_id), None)
    return thread.status.type != "active" and (turn is None or turn.status != "inProgress")


def held(call: str, reason: str, tokens: Tokens | None = None, error: str | None = None) -> Held:
    """The held row of an interrupted call: `error`, else the reason's own words."""
    return Held(call=call, reason=reason, error=error or _WHY.get(reason, reason), tokens=tokens)


_WHY = {
    PAUSED: "the run was paused (crw flow pause)",
    CANCELLED: "the run was cancelled (crw flow cancel)",
    DEADLINE: "the node's timeout ran out",
}


@dataclass(frozen=True)
class Intent:
    """An interrupt_requested row: the turn it goes with, and its reason."""

    reason: str
    op: str | None
    attempt: int | None
    turn_id: str | None
    error: str | None = None


def intent(rows: Iterable[Row]) -> Intent | None:
    """The interrupt intent a resumed call reads from its rows (HARV-37): the
    newest interrupt_requested row of the call's newest generation (from its
    newest prepared row), with the step and attempt it names. None without one."""
    found: Intent | None = None
    for row in rows:
        kind = row.get("row")
        if kind == "prepared":
            found = None
        elif kind == "interrupt_requested":
            found = Intent(
                reason=str(row.get("reason") or PAUSED),
                op=row.get("op"),
                attempt=row.get("attempt"),
                turn_id=row.get("turn_id"),
                error=row.get("error"),
            )
    return found


def applies(found: Intent | None, step: StepPublished, turn_id: str) -> bool:
    """Whether `found` goes with the turn `turn_id` of `step` the call reads
    (HARV-37..42): the same step (op), the same attempt, the same turn. A new
    attempt, a step published again and a turn the host started after the
    interrupt start with none; an intent is never moved onto another turn."""
    if found is None:
        return False
    same_turn = found.turn_id is None or found.turn_id == turn_id
    return found.op == step.op and found.attempt == step.attempt and same_turn


def run_rows(
    reason: str, request: str | None, nodes: Iterable[str], finished: Mapping[str, str]
) -> list[RowModel]:
    """The run's own rows once every call it stopped is held: `paused`, or
    `cancelled` and `ended` (status cancelled, each node's end)."""
    if reason == PAUSED:
        return [Paused(reason=PAUSED, request=request)]
    state = {node: finished.get(node, "unrun") for node in nodes}
    return [
        Cancelled(reason=CANCELLED, request=request, state=state),
        Ended(status=CANCELLED, state=state),
    ]


def goes_on(run: RunState) -> list[str]:
    """The nodes whose calls a pause held: a resumed run runs them again."""
    return [
        call.node
        for call in run.calls.values()
        if call.node is not None and call.state == "held" and call.reason == PAUSED
    ]


def open_nodes(run: RunState) -> frozenset[str]:
    """The nodes whose calls have rows and no terminal row: left open by an
    earlier process."""
    return frozenset(
        call.node
        for call in run.calls.values()
        if call.node is not None and call.state not in TERMINAL_ROWS
    )
