"""The shadow replay of one call's turns: its rows in, the points where the
decisions the run's code makes from them differ from what the rows record.

Each check drives the function the call actors drive, with the inputs the trace
keeps:

- harvest: a terminal completed row's answer (`raw_text` when it was taken out of
  prose, else its `result`) as the turn's final message, through
  `harvest.decide` with the call's schema, the repair flag, attempt and k of the
  step it answered; a review call's end through `review.settle_review`;
- repair: a repair step's `previous_answer` (its own, or the one of the row it
  names) through `harvest.decide` (it must
  decide the repair, and the errors it names);
- tokens: the session call's figure (`outcome.turn_tokens` of the rollout's total
  and the step's tokens_seen, plus its call_tokens), an App Server call's thread
  total, both read from the rollout file the thread_started row names;
- turns: each turn_started row answers a step_published row of its k and attempt;
- lost: what follows a session_attempt_lost row (`lost.after_lost`).

What the trace does not keep is taken as given and said so (`GIVEN`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from crw.engine.answers import harvest
from crw.engine.answers.outcome import turn_tokens
from crw.engine.calls import lost, review
from crw.engine.config.workflow_nodes import Review
from crw.engine.steps import step_input
from crw.host.protocol import AgentMessage, Turn
from crw.journal.rows import Held, RowModel, StepPublished, Tokens

Row = Mapping[str, Any]
ReadTotal = Callable[[str], Tokens | None]
"""The thread's running total as the rollout file at a path says; None unreadable."""

GIVEN = (
    "when a lost attempt was lost (LostAfter, the host's thread status): host timing",
    "the owner's wakes and their delivery (session_wake, message_delivery): timers "
    "and the owner thread's state",
    "which subagent took a step (thread_started): the owner's spawn, as the host showed it",
    "a null_model or held end's cause (the turn's messages and error are on the host)",
    "the messages of a turn beyond its answer (commentary, prose before a recorded result)",
    "the session pool's agents.max_threads cap (read from CODEX_HOME at run time): "
    "admission is checked against run.json's pool",
    "the order in which calls admitted together write their prepared rows",
    "the tokens of a call whose rollout file cannot be read, or an App Server fix call's "
    "(its forked thread's figure comes from the host's notifications): counted as "
    "'tokens taken as given'",
    "a rerun's reused answer (reused): its source run's, as the completed row after it "
    "records it; its digest and its node's schema are checked, its turns are the source's",
)
"""What a shadow replay takes from the rows as recorded, not decided again."""


@dataclass(frozen=True)
class Point:
    """A place where the replayed decision differs from the recorded row."""

    line: int
    """The row's line in journal.jsonl (1-based)."""
    seq: int | None
    call: str | None
    check: str
    recorded: str
    replayed: str


@dataclass
class CallTrace:
    """One call's rows so far, and what its admission decided."""

    call: str
    node: str
    schema: Mapping[str, Any]
    review: Review | None = None
    ordinal: int = 1
    """The call's place in its node's chain (review rounds count from 1)."""
    review_call: bool = False
    fork: bool = False
    """Continues another call's conversation (an App Server fix call forks)."""
    steps: list[Row] = field(default_factory=list)
    threads: list[Row] = field(default_factory=list)
    lost_next: lost.NextAttempt | Held | None = None
    unmeasured: bool = False
    reused: bool = False
    """A rerun's call that took its source's answer (a reused row opened it)."""


def _turn(text: str) -> Turn:
    return Turn(
        id="shadow",
        status="completed",
        items=[AgentMessage(id="a", text=text, phase="final_answer")],
    )


def answer_text(row: Row) -> str:
    """The turn's answer as the completed row keeps it."""
    if row.get("extracted") and isinstance(row.get("raw_text"), str):
        return str(row["raw_text"])
    return json.dumps(row.get("result"))


def last_step(trace: CallTrace) -> StepPublished:
    return StepPublished.model_validate((trace.steps or [{}])[-1])


def check_turn(trace: CallTrace, row: Row, line: int) -> list[Point]:
    """A turn_started row answers a step_published row of its k and attempt."""
    key = (row.get("k"), row.get("attempt"))
    if any((s.get("k"), s.get("attempt")) == key for s in trace.steps):
        return []
    return [
        _point(
            row,
            line,
            "turn",
            f"turn_started k {key[0]} attempt {key[1]}",
            "no step_published row of that k and attempt precedes it: no turn to start",
        )
    ]


def check_repair(trace: CallTrace, row: Row, line: int) -> list[Point]:
    """A repair step: the previous answer must break the schema (harvest decides
    the repair) with the errors the step names."""
    previous = step_input.answer_of(row, trace.steps)
    text = previous if isinstance(previous, str) else json.dumps(previous)
    turn = _turn(text)
    end = harvest.decide(trace.call, trace.schema, turn, Tokens(), repaired=False)
    if end.row is not None:
        return [
            _point(row, line, "repair", "a repair step", f"harvest ends the call {_end(end.row)}")
        ]
    errors = end.repair.errors if end.repair is not None else []
    if list(row.get("repair_errors") or []) != errors:
        return [
            _point(row, line, "repair", f"repair_errors {row.get('repair_errors')}", f"{errors}")
        ]
    return []


def check_end(trace: CallTrace, row: Row, line: int, read_total: ReadTotal) -> list[Point]:
    """A completed row: the harvest of its answer, and its tokens."""
    step = last_step(trace)
    tokens = expected_tokens(trace, step, read_total)
    end = harvest.decide(
        trace.call,
        trace.schema,
        _turn(answer_text(row)),
        tokens or Tokens(),
        repaired=bool(step.repair),
        attempt=step.attempt or 1,
        k=step.k,
    )
    decided: RowModel | None = end.row
    if decided is not None and trace.review_call and trace.review is not None:
        decided = review.settle_review(trace.review, trace.ordinal, decided)
    if decided is None:
        return [_point(row, line, "harvest", _end(row), "harvest sends the repair turn")]
    body = decided.model_dump()
    keys = _END_KEYS.get(str(body.get("row")), ("row",))
    if tokens is not None:
        keys += ("tokens",)
    return _compare(row, line, body, keys)


_END_KEYS = {
    "completed": ("row", "result_digest", "attempt", "k"),
    "held": ("row", "result_digest"),  # a review rejected after its last round keeps its result
}


def check_tokens(trace: CallTrace, row: Row, line: int, read_total: ReadTotal) -> list[Point]:
    """A null_model row's tokens (its cause is the host's)."""
    tokens = expected_tokens(trace, last_step(trace), read_total)
    if tokens is None:
        return []
    return _compare(row, line, {"tokens": tokens.model_dump()}, ("tokens",))


def expected_tokens(trace: CallTrace, step: StepPublished, read_total: ReadTotal) -> Tokens | None:
    """The call's tokens as the run's code counts them from the rollout, or None
    when the trace cannot tell (no rollout, a fork's thread, a turn unmeasured)."""
    threads = trace.threads
    path = threads[-1].get("rollout_path") if threads else None
    if trace.unmeasured or trace.fork or not isinstance(path, str):
        return None
    total = read_total(path)
    if total is None:
        return None
    if threads[-1].get("via") == "app-server":
        return total  # the thread is the call's alone
    seen = Tokens(**(step.tokens_seen.model_dump() if step.tokens_seen else {}))
    before = Tokens(**(step.call_tokens.model_dump() if step.call_tokens else {}))
    return before + turn_tokens(total, seen)


def lost_next(trace: CallTrace, max_attempts: int) -> None:
    """After a lost attempt: what the run's code does next (`lost.after_lost`)."""
    trace.lost_next = lost.after_lost(trace.call, last_step(trace), max_attempts)


def check_after_lost(trace: CallTrace, row: Row, line: int) -> list[Point]:
    """The step or held row that follows a lost attempt, against `lost.after_lost`."""
    expected, trace.lost_next = trace.lost_next, None
    if isinstance(expected, Held):
        return _compare(row, line, expected.model_dump(), ("row", "reason"), "lost")
    assert expected is not None
    want = {
        "row": "step_published",
        "k": expected.k,
        "attempt": expected.attempt,
        "conversation_turn": expected.conversation_turn,
        "replaces_turn": expected.replaces_turn,
    }
    return _compare(row, line, want, tuple(want), "lost")


def _compare(
    row: Row, line: int, want: Mapping[str, Any], keys: Sequence[str], check: str = "harvest"
) -> list[Point]:
    """A point for each of `keys` whose recorded value is not the replayed one
    (tokens are told by `check` tokens)."""
    points = []
    for key in keys:
        got, expected = row.get(key), want.get(key)
        if key == "tokens":
            got, expected = (
                Tokens(**(got or {})).model_dump(),
                Tokens(**(expected or {})).model_dump(),
            )
        if got != expected:
            points.append(
                _point(
                    row,
                    line,
                    check if key != "tokens" else "tokens",
                    f"{key} {json.dumps(got)}",
                    f"{key} {json.dumps(expected)}",
                )
            )
    return points


def _end(row: Row | RowModel) -> str:
    body = row.model_dump() if isinstance(row, RowModel) else row
    reason = body.get("reason")
    return f"{body.get('row')}" + (f" ({reason})" if reason else "")


def _point(row: Row, line: int, check: str, recorded: str, replayed: str) -> Point:
    seq = row.get("seq")
    return Point(
        line=line,
        seq=seq if isinstance(seq, int) else None,
        call=row.get("call"),
        check=check,
        recorded=recorded,
        replayed=replayed,
    )
