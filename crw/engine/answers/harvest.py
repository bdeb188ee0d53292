"""The harvest decision: one ended turn in, the call's end out.

Pure (a host `Turn` and the call's schema in, rows out): the answer rules and the
schema validation of `answer`, the failed-turn outcomes of `outcome`, and the one
repair. Both backends' call actors act on it.

The completed row keeps the result once: `result` is its canonical JSON (the text
its result_digest is over), and `raw_text`, the message as it was, only when the
result was taken out of prose (`extracted`); a message that is the object itself
says nothing its result does not. A result taken out of prose is kept once: the
row names where it stands in `raw_text` (`result_span`) and the journal writes no
`result` beside it (`crw.journal.result_span`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from crw.engine.answers import answer, outcome
from crw.engine.answers.schema_check import CHECK_SECONDS
from crw.host.protocol import AgentMessage, Turn
from crw.journal import result_span
from crw.journal.rows import Completed, Held, NullModel, RowModel, Tokens


@dataclass(frozen=True)
class Repair:
    """What the repair turn names of an answer that broke the schema: its errors
    and the answer as it was (no JSON object: that, and no answer)."""

    errors: list[str]
    previous: str


@dataclass(frozen=True)
class CallEnd:
    """How the call ended, for the run: its terminal row, and `pause` when a usage
    or rate limit means the run must pause (the call is then held, reason paused).
    No row: the answer broke the schema and `repair` is the turn to send."""

    row: RowModel | None
    pause: str | None = None
    repair: Repair | None = None


def messages(turn: Turn) -> list[answer.Message]:
    return [
        answer.Message(text=item.text or "", phase=item.phase)
        for item in turn.items
        if isinstance(item, AgentMessage)
    ]


def canonical_result(result: Mapping[str, Any]) -> Any:
    """`result` as its canonical JSON reads back: the keys sorted at every level,
    so the row's `result` is the text its result_digest is computed over (HARV-6)."""
    return json.loads(answer.canonical(result))


def span_of(verdict: answer.Valid) -> list[int] | None:
    """Where the result taken out of `verdict`'s message stands in it, when the
    journal reads that slice back as exactly the result (its digest): the row
    then keeps the message alone (`crw.journal.result_span`); else None, and the
    row keeps its `result` beside the message."""
    text, span = verdict.raw_text, verdict.span
    if span is None or not result_span.reads_back(text):
        return None
    try:
        again = result_span.result_in(text, span)
    except (ValueError, RecursionError):
        return None
    try:
        same = answer.digest(again) == verdict.result_digest
    except ValueError:  # a number JSON cannot write back (1e400)
        return None
    return list(span) if same else None


def decide(
    call: str,
    schema: Mapping[str, Any],
    turn: Turn,
    tokens: Tokens,
    *,
    repaired: bool,
    attempt: int = 1,
    k: int | None = None,
    max_bytes: int | None = None,
    check_seconds: float = CHECK_SECONDS,
) -> CallEnd:
    """The harvest decision for one ended turn: a terminal row (with `pause` when the
    run must pause), or no row: send the repair turn. `k` is the ended turn's (by
    default 2 for a repair, else 1); an answer over `max_bytes` (the run's
    answer_max_bytes; None: no bound) ends the call, with no repair. It checks the
    answer against `schema` within `check_seconds` of CPU (schema_check): an answer
    that cannot be checked in that time ends the call null_model, reason
    schema_check_timed_out."""
    if outcome.turn_failed(turn.status, turn.error is not None):
        kind = turn.error.kind if turn.error else None
        failure = outcome.failure_outcome(kind)
        error = (turn.error.message if turn.error else None) or kind
        if failure.action == "pause":
            held = Held(call=call, reason="paused", error=error, tokens=tokens)
            return CallEnd(held, pause=failure.reason)
        if failure.action == "null_model":
            return CallEnd(NullModel(call=call, reason=failure.reason, tokens=tokens))
        return CallEnd(Held(call=call, reason=failure.reason, error=error, tokens=tokens))
    if turn.status == "interrupted":
        error = "the turn was interrupted"
        return CallEnd(Held(call=call, reason="host_failure", error=error, tokens=tokens))
    verdict = answer.judge(messages(turn), schema, max_bytes, check_seconds)
    if isinstance(verdict, answer.Valid):
        row = Completed(
            call=call,
            result=canonical_result(verdict.result),
            result_digest=verdict.result_digest,
            raw_text=verdict.raw_text if verdict.extracted else None,
            result_span=span_of(verdict) if verdict.extracted else None,
            extracted=verdict.extracted,
            tokens=tokens,
            attempt=attempt,
            k=k if k is not None else (2 if repaired else 1),
        )
        return CallEnd(row)
    if isinstance(verdict, answer.Unchecked):
        return CallEnd(
            NullModel(
                call=call, reason="schema_check_timed_out", errors=[verdict.error], tokens=tokens
            )
        )
    if isinstance(verdict, answer.TooLarge):
        return CallEnd(too_large(call, verdict, tokens))
    if not repaired:
        if isinstance(verdict, answer.Invalid):
            return CallEnd(None, repair=Repair(list(verdict.errors), verdict.raw_text))
        return CallEnd(None, repair=Repair([answer.NO_OBJECT], ""))
    if isinstance(verdict, answer.Empty):
        return CallEnd(NullModel(call=call, reason="empty_answer", tokens=tokens))
    return CallEnd(
        NullModel(
            call=call, reason="schema_invalid_after_repair", errors=verdict.errors, tokens=tokens
        )
    )


def too_large(call: str, verdict: answer.TooLarge, tokens: Tokens) -> NullModel:
    """The end of a call whose answer is over answer_max_bytes: its size and the cap,
    not its text."""
    error = f"$: the answer is {verdict.size:,} bytes, over answer_max_bytes ({verdict.cap:,})"
    return NullModel(
        call=call,
        reason="answer_too_large",
        errors=[error],
        answer_bytes=verdict.size,
        answer_max_bytes=verdict.cap,
        tokens=tokens,
    )
