"""Held calls and their decisions (pure): rows in, decisions out.

A held call waits for a person's decision (`crw flow answer RUN CALL --retry |
--skip | --abort | --restart`), written as a `decision` row:

- retry: the call goes on in place, after the subagents of its held attempts are
  shown not running (ATT-30): a delivered turn is taken again by a new attempt on
  a new subagent, at the next k and at the conversation turn of the turn it
  replaces (ATT-32); a call held in its repair turn goes on with that repair and
  has no second repair (ATT-33, ATT-34); a step published and never bound is
  looked up by its marker first (ATT-35), but for a repair the hold kept from
  its subagent (`undelivered`) and a spawn the host refused (spawn_failed),
  which go to a new attempt (STEP-26);
- skip: the node ends `skipped`, with no result; the nodes that need it never run
  (they end `unrun`), every other node runs;
- abort: the run ends (`aborted`);
- restart: the node runs again in a new call (`by`), which supersedes the call
  once its subagents run nothing (`crw.engine.holds.supersede`, ATT-36). An open call
  restarts too, once no process runs it.

`decide_answer` judges a command's answer against the rows; `in_place` is how a
retried call goes on. The actors act: `crw.cli.run.answer` appends the row,
`crw.actors.held_call` goes on with the call.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from crw.engine.config.role_names import WRITING_ROLES
from crw.engine.held_fix import SPAWN_FAILED
from crw.engine.holds.supersede import RESTART, successor
from crw.engine.steps import step_input
from crw.engine.steps.bind import find_marker_turn
from crw.host.protocol import Thread
from crw.journal.replay import RunState
from crw.journal.rows import Decision

Row = Mapping[str, Any]
Choice = Literal["retry", "skip", "abort", "restart"]
CHOICES: tuple[Choice, ...] = ("retry", "skip", "abort")
"""The answers to a held call the hints name; restart is the fourth."""
HELD_INTERRUPT = "held"
"""The reason of the interrupt_requested row of a held attempt's running turn."""


@dataclass(frozen=True)
class Refused:
    """The answer is refused; `line` says what, where and how to fix it."""

    line: str


@dataclass(frozen=True)
class Already:
    """The call was given this very answer already: nothing to append."""

    choice: str


@dataclass(frozen=True)
class Record:
    """Append `row`."""

    row: Decision


Answer = Refused | Already | Record


def answered(rows: Iterable[Row]) -> tuple[Row | None, str | None]:
    """One call's newest held row, and the choice of the decision row after it
    (None while the held row waits for one)."""
    held: Row | None = None
    choice: str | None = None
    for row in rows:
        if row.get("row") == "held":
            held, choice = row, None
        elif row.get("row") == "decision" and held is not None:
            choice = str(row.get("choice"))
    return held, choice


def decide_answer(
    run: RunState,
    call_rows: Sequence[Row],
    run_id: str,
    call: str,
    choice: Choice,
    *,
    live: bool = False,
    again: str | None = None,
) -> Answer:
    """The answer `choice` to `call` of `run`: refused (an unknown call, a run that
    has ended, an answer that differs from the one given, a call not held, a run
    not waiting_decision), the same answer given already, or the decision row to
    append. A restart takes an open call too, unless `live` (a process holds the
    run: it runs the call). `again` is the command that starts the run's workflow
    again, which the refusal of an ended run names."""
    state = run.calls.get(call)
    if state is None:
        return Refused(f"run {run_id} has no call {call}; its calls: crw flow status {run_id}")
    if choice == RESTART:
        return _restart(run, call_rows, run_id, call, live=live, again=again)
    held, given = answered(call_rows)
    if given == choice:
        return Already(choice)
    if run.state == "ended":
        return Refused(_ended_line(run, run_id, call, again))
    if given is not None:
        return Refused(_answered_line(run_id, call, given))
    if state.state != "held" or held is None:
        return Refused(
            f"call {call} of run {run_id} is {state.state}, not held; only a held call "
            f"takes an answer (see crw flow status {run_id})"
        )
    if run.state != "waiting_decision":
        return Refused(
            f"run {run_id} is {run.state}, not waiting_decision; "
            + _not_waiting_fix(run.state, run_id)
        )
    return Record(Decision(call=call, choice=choice, reason=held.get("reason")))


_OPEN = frozenset({"prepared", "waiting_session", "running", "lost"})


def _ended_line(run: RunState, run_id: str, call: str, again: str | None) -> str:
    """Why a call of an ended run takes no answer, and what runs its work again."""
    start = f": {again}" if again else " of its workflow (crw flow start WORKFLOW)"
    return (
        f"run {run_id} has ended ({run.ended_status}): its call {call} takes no answer, "
        f"nothing would run it; to run it again, start a new run{start}"
    )


def _restart(
    run: RunState,
    call_rows: Sequence[Row],
    run_id: str,
    call: str,
    *,
    live: bool,
    again: str | None = None,
) -> Answer:
    state = run.calls[call]
    if any(r.get("row") == "decision" and r.get("choice") == RESTART for r in call_rows):
        return Already(RESTART)
    if run.backend != "session":
        return Refused(
            f"run {run_id} runs on the {run.backend} backend; --restart restarts session "
            f"calls only: answer call {call} --retry or --skip"
        )
    if run.state == "ended":
        return Refused(_ended_line(run, run_id, call, again))
    held, given = answered(call_rows)
    if state.state == "held" and given is not None:
        return Refused(_answered_line(run_id, call, given))
    if state.state not in _OPEN and state.state != "held":
        return Refused(
            f"call {call} of run {run_id} is {state.state}; only a held call, or an open "
            f"one, restarts (see crw flow status {run_id})"
        )
    if state.state != "held" and live:
        return Refused(
            f"call {call} of run {run_id} runs in the run's live process; pause the run "
            f"first (crw flow pause {run_id}), then answer crw flow answer {run_id} {call} "
            "--restart"
        )
    reason = held.get("reason") if held is not None and state.state == "held" else None
    return Record(Decision(call=call, choice=RESTART, reason=reason, by=successor(run, call)))


def _not_waiting_fix(state: str, run_id: str) -> str:
    if state == "paused":
        return f"go on with crw flow resume {run_id} --detach, then answer what is held"
    return f"there is nothing to answer (see crw flow status {run_id})"


def answer_commands(run_ref: str, call: str, rest: str = "") -> dict[str, str]:
    """The exact command of each answer to a held call, by choice."""
    tail = f" {rest}" if rest else ""
    return {choice: f"crw flow answer {run_ref} {call} --{choice}{tail}" for choice in CHOICES}


@dataclass(frozen=True)
class InPlace:
    """How a retried call goes on.

    `look_up`: the newest step was published and never bound: it is looked up by
    its marker first, then published again (the step's own rows say how). Else a
    new attempt spawns the turn again: `k`, `attempt`, `conversation_turn`,
    `replaces_turn` (the marker of the turn it replaces), `repair` with the
    `previous_answer` it repairs, and the packet's `note` (why the previous attempt
    stopped, and the call's earlier attempts)."""

    look_up: bool
    k: int = 1
    attempt: int = 1
    conversation_turn: int = 1
    replaces_turn: str | None = None
    repair: bool = False
    previous_answer: Any = None
    previous_answer_in: str | None = None
    """The marker of the step row that holds `previous_answer`: the new step's
    row names it rather than copy it (`step_input.refer`)."""
    repair_errors: list[str] | None = None
    note: str | None = None


def in_place(
    rows: Sequence[Row], role: str, workspace: str, *, undelivered: bool = False
) -> InPlace:
    """How `rows`, one call's rows ending in a held row answered retry, go on.
    `undelivered`: the newest step is a repair that never reached its subagent,
    which the hold closed: a new attempt spawns it, the repair's first turn (no
    turn to replace). A step whose spawn the host refused (held spawn_failed) is
    spawned by a new attempt too, with the pair the run pins now."""
    steps = [row for row in rows if row.get("row") == "step_published"]
    step = steps[-1]
    k, attempt = int(step.get("k") or 1), int(step.get("attempt") or 1)
    bound = any(
        row.get("row") == "turn_started" and (row.get("k"), row.get("attempt")) == (k, attempt)
        for row in rows
    )
    held, _ = answered(rows)
    refused = held is not None and held.get("reason") == SPAWN_FAILED
    if not bound and not undelivered and not refused:
        return InPlace(look_up=True)
    repair = bool(step.get("repair"))
    return InPlace(
        look_up=False,
        k=max(int(s.get("k") or 1) for s in steps) + 1,
        attempt=attempt + 1,
        conversation_turn=int(step.get("conversation_turn") or (2 if repair else 1)),
        replaces_turn=str(step.get("marker")) if bound else None,
        repair=repair,
        previous_answer=step_input.answer_of(step, rows) if repair else None,
        previous_answer_in=step_input.holder(step) if repair else None,
        repair_errors=step.get("repair_errors") if repair else None,
        note=held_note(rows, role, workspace, attempt + 1),
    )


def undelivered(step: Row, thread: Thread | None) -> bool:
    """Whether a held call's newest step, published and never bound, is a repair
    (send_input) no turn of its subagent carries: the hold closed that subagent
    (its close step), so the repair can be sent to it no more. `thread`: the
    subagent as the host shows it once it runs nothing; None when the host does
    not know it."""
    if step.get("action") != "send_input":
        return False
    return thread is None or find_marker_turn(str(step.get("marker")), thread) is None


def held_note(
    rows: Sequence[Row], role: str, workspace: str, attempt: int, where: str = "on a new subagent"
) -> str:
    """The packet's note for `attempt`, which takes a held call's turn again
    (`where`: on a new subagent, or an App Server call's new turn on its thread):
    why the previous attempt stopped, the call's earlier attempts (STEP-53), and
    for a writing role, to read the state its workspace was left in first."""
    held, choice = answered(rows)
    why = _held_why(held or {})
    how = "was answered retry" if choice == "retry" else "the run was resumed"
    lines = [
        f"Attempt {attempt - 1} of this call stopped: the call was held ({why}) and "
        f"{how}; this is attempt {attempt}, {where}.",
        "The call's earlier attempts:",
        *(f"- {line}" for line in earlier_attempts(rows)),
    ]
    if role in WRITING_ROLES:
        lines.append(
            f"Read `git -C {workspace} status` and the diff first: "
            "the earlier attempts may have left changes there."
        )
    return "\n".join(lines)


def _held_why(held: Row) -> str:
    reason, error = held.get("reason") or "held", held.get("error")
    return f"{reason}: {error}" if error else str(reason)


def earlier_attempts(rows: Sequence[Row]) -> list[str]:
    """One line per attempt the rows name: its turns (markers, each once: a step
    published again after its hold is the same turn) and how it ended."""
    turns: dict[int, list[str]] = {}
    ends: dict[int, str] = {}
    attempt = 0
    for row in rows:
        kind = row.get("row")
        if kind == "step_published":
            attempt = int(row.get("attempt") or 1)
            markers = turns.setdefault(attempt, [])
            if str(row.get("marker")) not in markers:
                markers.append(str(row.get("marker")))
        elif kind == "session_attempt_lost":
            ends[int(row.get("attempt") or attempt)] = f"lost ({row.get('reason')})"
        elif kind == "held" and attempt:
            ends[attempt] = f"held ({_held_why(row)})"
    return [
        f"attempt {n}: {', '.join(markers)}: {ends.get(n, 'stopped')}"
        for n, markers in sorted(turns.items())
    ]


def _answered_line(run_id: str, call: str, given: str) -> str:
    """The refusal of a second answer to one hold: what was answered, and that the
    run goes on with it."""
    return (
        f"call {call} of run {run_id} was answered {given} already, and a held call takes "
        f"one answer: the run goes on with {given}; see it with crw flow status {run_id} "
        f"(go on with crw flow resume {run_id} --detach if no process runs it)"
    )
