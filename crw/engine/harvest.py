"""The harvest decision: one ended turn in, the call's end out.

Pure (a host `Turn` and the call's schema in, rows out): the answer rules and the
schema validation of `answer`, the failed-turn outcomes of `outcome`, and the one
repair. Both backends' call actors act on it.

The completed row keeps the result once: `result` is its canonical JSON (the text
its result_digest is over); a result taken out of prose (`extracted`) keeps the
prose around it (`prose`, `result_at`: `crw.engine.prose`), and a message that is
the object itself says nothing its result does not.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from crw.engine import answer, outcome, prose
from crw.engine.schema_check import CHECK_SECONDS
from crw.host.protocol import AgentMessage, Turn
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
        result = canonical_result(verdict.result)
        cut = (
            prose.split(verdict.raw_text, result, verdict.result_digest)
            if verdict.extracted
            else None
        )
        row = Completed(
            call=call,
            result=result,
            result_digest=verdict.result_digest,
            raw_text=verdict.raw_text if verdict.extracted and cut is None else None,
            prose=cut[0] if cut is not None else None,
            result_at=cut[1] if cut is not None else None,
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
