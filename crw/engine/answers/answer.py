"""A turn's answer: which message it is, the JSON object in it, and its judgement.

The harvest (session-calls.md, "The harvest"): the answer is the turn's last
final_answer message, or from a provider that sets no phase the last message
without one when no commentary came before it. When prose precedes the JSON, the
object that ends the message is taken out of it; the completed row keeps the
canonical result, its result_digest and the message as it was. The schema check
is the engine's, the same for every backend, and bounded in time (schema_check).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from crw.engine.answers import schema_check
from crw.host.compact import compact_encoder
from crw.text import escape_surrogates

FINAL_ANSWER = "final_answer"
COMMENTARY = "commentary"
NO_OBJECT = "$: the answer holds no JSON object"
_CLOSING_FENCE = "```"
_CANONICAL = compact_encoder(ensure_ascii=False, sort_keys=True, allow_nan=False)
"""`canonical`'s encoder, kept: `json.dumps` with its arguments builds one a call
(three digests and a canonical result a call)."""


@dataclass(frozen=True)
class Message:
    """An agent message of a turn: its text and its phase (`commentary`,
    `partial_answer`, `final_answer`, or None when the provider sets none)."""

    text: str
    phase: str | None


def take_answer(messages: Sequence[Message]) -> str | None:
    """The text of the turn's answer among its agent messages, in turn order.

    The last final_answer message; else the last message without a phase when no
    commentary came before it (HARV-2, HARV-3). A commentary message and a
    partial_answer are never the answer (HARV-4). None when there is no answer.
    """
    finals = [m for m in messages if m.phase == FINAL_ANSWER]
    if finals:
        return finals[-1].text
    unphased = [i for i, m in enumerate(messages) if m.phase is None]
    if not unphased:
        return None
    last = unphased[-1]
    if any(m.phase == COMMENTARY for m in messages[:last]):
        return None
    return messages[last].text


@dataclass(frozen=True)
class Extracted:
    """The JSON object of an answer. `result` is None when there is none;
    `extracted` is True when prose preceded it; `raw_text` is the message as it was."""

    result: dict[str, Any] | None
    extracted: bool
    raw_text: str
    span: tuple[int, int] | None = field(default=None, compare=False)
    """Where an object taken out of prose stands in `raw_text` (start, end)."""


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


_DECODER = json.JSONDecoder(parse_constant=_refuse_constant)


def extract(text: str) -> Extracted:
    """The JSON object of the message `text` (HARV-5).

    The whole text when it is a JSON object; else the object that ends the message
    (followed by nothing but whitespace or a closing code fence), taken out of the
    prose before it. NaN and Infinity are not JSON and make no object.
    """
    try:
        whole = _DECODER.decode(text)
    except (ValueError, RecursionError):
        whole = None
    if isinstance(whole, dict):
        return Extracted(whole, extracted=False, raw_text=text)
    found = _ending_object(_body(text))
    if found is None:
        return Extracted(None, extracted=False, raw_text=text)
    return Extracted(found[0], extracted=True, raw_text=text, span=found[1])


def _body(text: str) -> str:
    """The message without the whitespace and closing code fence that end it."""
    body = text.rstrip()
    if body.endswith(_CLOSING_FENCE):
        body = body[: -len(_CLOSING_FENCE)].rstrip()
    return body


def _ending_object(body: str) -> tuple[Any, tuple[int, int]] | None:
    """The JSON value that ends `body` and where it stands (start, end), from its
    earliest "{" (the outermost one); None when there is none."""
    start = body.find("{")
    while start >= 0:
        try:
            value, end = _DECODER.raw_decode(body, start)
        except (ValueError, RecursionError):
            pass
        else:
            if end == len(body):
                return value, (start, end)
        start = body.find("{", start + 1)
    return None


def canonical(value: Any) -> str:
    """The canonical JSON of `value`: sorted keys, no spaces, not ASCII-escaped but
    for a lone surrogate, which UTF-8 cannot hold: its `\\uXXXX` escape, as the
    journal writes it (`crw.text`)."""
    return escape_surrogates(_CANONICAL(value))


def digest(value: Any) -> str:
    """`"sha256:" + hex` of the canonical JSON of `value` (a result_digest)."""
    return "sha256:" + hashlib.sha256(canonical(value).encode("utf-8")).hexdigest()


def validate(
    result: Any, schema: Mapping[str, Any], seconds: float = schema_check.CHECK_SECONDS
) -> list[str]:
    """Every way `result` fails the JSON Schema `schema` (Draft 2020-12), one line
    each, `<JSON path>: <message>`, sorted. Empty when it passes.

    Raises:
        SchemaCheckTimedOut: the check took longer than `seconds` of CPU, or
            recursed without end (schema_check).
    """
    return schema_check.check(result, schema, seconds)


@dataclass(frozen=True)
class Valid:
    """The answer passed: what the completed row keeps (HARV-6, HARV-7)."""

    result: dict[str, Any]
    result_digest: str
    raw_text: str
    extracted: bool
    span: tuple[int, int] | None = field(default=None, compare=False)
    """Where the result taken out of prose stands in `raw_text` (start, end)."""


@dataclass(frozen=True)
class Invalid:
    """The answer failed its schema, or holds no JSON object: the repair turn
    names `errors` and the answer as it was."""

    errors: list[str]
    raw_text: str


@dataclass(frozen=True)
class Empty:
    """The turn gave no answer (no message that is one, or only whitespace)."""


@dataclass(frozen=True)
class Unchecked:
    """The answer could not be checked against its schema in time: `error` says
    why. The call ends null_model (schema_check_timed_out), with no repair."""

    error: str
    raw_text: str


@dataclass(frozen=True)
class TooLarge:
    """The answer is over the run's answer_max_bytes: `size` UTF-8 bytes against
    `cap`. The call ends null_model (answer_too_large), unparsed, with no repair."""

    size: int
    cap: int


Judgement = Valid | Invalid | Empty | Unchecked | TooLarge

_MAX_UTF8 = 4
"""The most UTF-8 bytes one character takes (a lone surrogate takes 3)."""


def size_over(text: str, cap: int) -> int | None:
    """The UTF-8 size of `text` when it is over `cap` bytes, else None.

    O(1) on the length Python keeps for any text of up to cap/4 characters and
    over cap characters; only one in between is encoded to be measured (and a
    text over the cap, once, for the size its row records)."""
    if len(text) * _MAX_UTF8 <= cap:
        return None
    size = len(text.encode("utf-8", "surrogatepass"))
    return size if size > cap else None


def judge(
    messages: Sequence[Message],
    schema: Mapping[str, Any],
    max_bytes: int | None = None,
    seconds: float = schema_check.CHECK_SECONDS,
) -> Judgement:
    """The judgement of a turn's agent messages against the call's schema, checked
    within `seconds` of CPU; an answer over `max_bytes` (None: no bound) is
    TooLarge, never parsed."""
    text = take_answer(messages)
    if text is None:
        return Empty()
    if max_bytes is not None and (size := size_over(text, max_bytes)) is not None:
        return TooLarge(size, max_bytes)
    if not text.strip():
        return Empty()
    found = extract(text)
    if found.result is None:
        return Invalid([NO_OBJECT], text)
    try:
        errors = validate(found.result, schema, seconds)
    except schema_check.SchemaCheckTimedOut as err:
        return Unchecked(f"$: {err}", text)
    if errors:
        return Invalid(errors, text)
    return Valid(found.result, digest(found.result), text, found.extracted, found.span)
