"""The harvest decision: one ended turn in, the call's end out (pure)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from crw.engine.answers import answer, harvest
from crw.host.protocol import AgentMessage, Turn, TurnError
from crw.journal import result_span
from crw.journal.log import decode, encode_batch, encode_body
from crw.journal.rows import Completed, Held, NullModel, Tokens

SCHEMA: dict[str, Any] = {"type": "object", "required": ["files"]}
TOKENS = Tokens(input=100, output=10, total=110)


def turn(status: str = "completed", text: str | None = None, **error: Any) -> Turn:
    items = [AgentMessage(id="m1", text=text, phase="final_answer")] if text is not None else []
    return Turn(
        id="t1",
        status=status,
        items=items,
        error=TurnError(message="boom", **error) if error else None,
    )


def test_completed_row_result_is_the_canonical_json_its_digest_is_over() -> None:
    """spec: HARV-6"""
    text = '{"zeta": 1, "files": ["ä.py"], "alpha": {"y": 2, "b": [true, null]}}'
    end = harvest.decide("build.1", SCHEMA, turn(text=text), TOKENS, repaired=False)
    assert isinstance(end.row, Completed)
    line = b"{" + encode_body(end.row) + b"}"
    canonical = answer.canonical(json.loads(text))
    assert b'"result":' + canonical.encode() + b"," in line
    stored = json.loads(line)
    assert (
        answer.digest(stored["result"])
        == stored["result_digest"]
        == answer.digest(json.loads(text))
    )


def test_answer_taken_whole_keeps_no_raw_text() -> None:
    """spec: HARV-6, HARV-7 (the message is its result's JSON: kept once)"""
    big = '{"files": ["' + "x" * 100_000 + '"]}'
    end = harvest.decide("build.1", SCHEMA, turn(text=big), TOKENS, repaired=False)
    assert isinstance(end.row, Completed)
    assert end.row.raw_text is None and end.row.extracted is False
    assert len(encode_body(end.row)) < 110_000


def test_answer_extracted_from_prose_keeps_the_message_as_it_was_and_the_result_once() -> None:
    """spec: HARV-5, HARV-6, HARV-7: the message byte for byte, with its own spaces
    and key order; the result where it stands in it, its canonical JSON read back."""
    marker = "m" * 5_000
    obj = f'{{ "z" :"{marker}",\n\t"files": [ "a.py" ] ,"a":1 }}'
    text = f"Done, here it is:\n```json\n{obj}\n```\n"
    end = harvest.decide("build.1", SCHEMA, turn(text=text), TOKENS, repaired=False)
    assert isinstance(end.row, Completed)
    assert end.row.raw_text == text and end.row.extracted is True
    assert end.row.result == {"a": 1, "files": ["a.py"], "z": marker}
    assert list(end.row.result) == ["a", "files", "z"]  # canonical, as before
    assert end.row.result_span == [text.index("{"), text.index("{") + len(obj)]
    body = encode_body(end.row)
    assert body.count(marker.encode()) == 1 and b'"result":' not in body
    (read,) = decode(encode_batch(1, "t", [body]), Path("j")).rows
    assert read["raw_text"] == text and read["result"] == end.row.result
    assert list(read["result"]) == ["a", "files", "z"]
    assert read["result_digest"] == answer.digest(end.row.result)


def test_a_message_whose_slice_would_not_read_back_keeps_its_result() -> None:
    """The row names a span only when the journal reads that slice back as exactly
    the result: else it keeps `result` beside the message, as a crw before did."""
    text = 'Done:\n{"files": [], "n": 1}'
    end = harvest.decide("build.1", SCHEMA, turn(text=text), TOKENS, repaired=False)
    assert isinstance(end.row, Completed) and end.row.result_span == [6, len(text)]
    paired = 'Done \ud83d\ude00:\n{"files": []}'  # a pair the journal reads back as one
    end = harvest.decide("build.1", SCHEMA, turn(text=paired), TOKENS, repaired=False)
    assert isinstance(end.row, Completed) and end.row.result_span is None
    assert end.row.raw_text == paired and b'"result":{"files":[]}' in encode_body(end.row)
    valid = answer.Valid({"files": [1]}, answer.digest({"files": [1]}), text, True, (6, 26))
    assert harvest.span_of(valid) is None  # the slice gives another result


def test_a_completed_row_without_a_span_reads_as_it_did() -> None:
    """A row a crw before wrote (result and raw_text) reads its result, not the
    message's; a span that gives nothing leaves the row without a result."""
    raw = 'x\n{"files": [1]}'
    old: dict[str, Any] = {"row": "completed", "result": {"files": []}, "raw_text": raw}
    spanned: dict[str, Any] = {"row": "completed", "raw_text": raw, "result_span": [2, 16]}
    rows = [dict(old), spanned]
    broken: dict[str, Any] = {"row": "completed", "raw_text": "x", "result_span": [0, 1]}
    result_span.with_results([*rows, broken])
    assert rows == [old, {**spanned, "result": {"files": [1]}}]
    assert "result" not in broken


@pytest.mark.parametrize(
    ("info", "row", "reason", "pause"),
    [
        ("usageLimitExceeded", Held, "paused", "usage_limit_exceeded"),
        ({"rateLimitExceeded": {"retryAfter": 3}}, Held, "paused", "rate_limit_exceeded"),
        ("contextWindowExceeded", NullModel, "context_window_exceeded", None),
        ({"httpConnectionFailed": {"httpStatusCode": 502}}, Held, "host_failure", None),
    ],
)
def test_turn_interrupted_with_an_error_is_a_failed_turn(
    info: Any, row: type, reason: str, pause: str | None
) -> None:
    """spec: HARV-11, HARV-12, HARV-13, HARV-14: an interrupted turn with an error
    gets its codexErrorInfo's outcome, whatever answer it holds."""
    ended = turn("interrupted", text='{"files": []}', codexErrorInfo=info)
    end = harvest.decide("build.1", SCHEMA, ended, TOKENS, repaired=False)
    assert isinstance(end.row, Held | NullModel) and type(end.row) is row
    assert end.row.reason == reason and end.pause == pause
    assert end.row.tokens == TOKENS
    if isinstance(end.row, Held):
        assert end.row.error == "boom"


def test_turn_interrupted_without_an_error_is_no_failed_turn() -> None:
    """spec: HARV-11 (an interrupt without an error is not TurnOutcome.Failed)"""
    ended = turn("interrupted", text='{"files": []}')
    end = harvest.decide("build.1", SCHEMA, ended, TOKENS, repaired=False)
    assert isinstance(end.row, Held) and end.row.reason == "host_failure"
    assert end.row.error == "the turn was interrupted" and end.pause is None


@pytest.mark.parametrize("repaired", [False, True])
def test_answer_over_the_cap_ends_null_model_unparsed_whatever_the_turn(repaired: bool) -> None:
    """Over answer_max_bytes: null_model answer_too_large, its size and the cap, no
    repair turn (a first answer too) and never parsed (it is not even JSON)."""
    text = "{" + "é" * 600  # 1,201 bytes in 601 characters
    end = harvest.decide(
        "build.1", SCHEMA, turn(text=text), TOKENS, repaired=repaired, max_bytes=1024
    )
    assert end.row == NullModel(
        call="build.1",
        reason="answer_too_large",
        errors=["$: the answer is 1,201 bytes, over answer_max_bytes (1,024)"],
        answer_bytes=1201,
        answer_max_bytes=1024,
        tokens=TOKENS,
    )
    assert end.pause is None


def test_answer_size_is_its_utf8_bytes_measured_only_near_the_cap() -> None:
    assert answer.size_over("é" * 512, 1024) is None  # 1,024 bytes: at the cap
    assert answer.size_over("é" * 513, 1024) == 1026
    assert answer.size_over("\ud800" * 400, 1024) == 1200  # a lone surrogate is 3 bytes
    assert answer.size_over("x" * 256, 1024) is None  # never encoded: 4 bytes a char at most
    assert answer.size_over("x" * 1025, 1024) == 1025
