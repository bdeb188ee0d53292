"""Checking an answer against its schema is bounded in time: a pattern that
backtracks without end (`^(a|a)*$` against 30 characters takes hours with `re`)
ends the check after CHECK_SECONDS, and the call null_model."""

from __future__ import annotations

import time
from typing import Any

import pytest

from crw.engine import answer, harvest
from crw.engine.schema_check import CHECK_SECONDS, SchemaCheckTimedOut, check
from crw.host.protocol import Turn
from crw.journal.rows import Tokens

EVIL = "^(a|a)*$"
LONG = "a" * 30 + "!"
BOUND = 5.0
"""Seconds a test allows where the unbounded check would take hours."""

SCHEMAS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "pattern": ({"properties": {"s": {"pattern": EVIL}}}, {"s": LONG}),
    "patternProperties": ({"patternProperties": {EVIL: {"type": "string"}}}, {LONG: "x"}),
    "additionalProperties": (
        {"patternProperties": {EVIL: True}, "additionalProperties": False},
        {LONG: 1},
    ),
    "unevaluatedProperties": (
        {"patternProperties": {EVIL: True}, "unevaluatedProperties": False},
        {LONG: 1},
    ),
}


@pytest.mark.parametrize("keyword", list(SCHEMAS))
def test_backtracking_pattern_ends_the_check_in_bounded_time(keyword: str) -> None:
    schema, result = SCHEMAS[keyword]
    began = time.monotonic()
    with pytest.raises(SchemaCheckTimedOut, match="took longer than"):
        check(result, schema)
    assert time.monotonic() - began < BOUND


def test_patterns_still_judge_answers() -> None:
    schema = {
        "properties": {"id": {"pattern": "^[a-z]+-[0-9]+$"}},
        "patternProperties": {"^x-": {"type": "integer"}},
        "additionalProperties": {"type": "string"},
    }
    assert check({"id": "ab-12", "x-n": 1, "other": "s"}, schema) == []
    assert check({"id": "AB", "x-n": "1", "other": 2}, schema) == [
        "$.id: 'AB' does not match '^[a-z]+-[0-9]+$'",
        "$.other: 2 is not of type 'string'",
        "$['x-n']: '1' is not of type 'integer'",
    ]


def test_the_bound_is_shared_by_every_match_of_a_check() -> None:
    schema = {"type": "array", "items": {"pattern": EVIL}}
    began = time.monotonic()
    with pytest.raises(SchemaCheckTimedOut):
        check([LONG] * 20, schema)
    # One bound per match would take 20 of them.
    assert time.monotonic() - began < BOUND < 20 * CHECK_SECONDS


def test_unchecked_answer_is_judged_unchecked() -> None:
    schema, _ = SCHEMAS["pattern"]
    verdict = answer.judge([answer.Message('{"s": "' + LONG + '"}', "final_answer")], schema)
    assert isinstance(verdict, answer.Unchecked)
    assert verdict.error.startswith("$: matching the pattern '^(a|a)*$' took longer than")


def test_answer_that_cannot_be_checked_in_time_ends_null_model_without_repair() -> None:
    schema, _ = SCHEMAS["pattern"]
    turn = Turn.model_validate(
        {
            "id": "t1",
            "status": "completed",
            "items": [
                {"type": "agentMessage", "id": "m", "text": '{"s": "' + LONG + '"}', "phase": None}
            ],
        }
    )
    began = time.monotonic()
    end = harvest.decide("a.1", schema, turn, Tokens(total=5), repaired=False)
    assert time.monotonic() - began < BOUND
    assert end.row is not None and end.pause is None
    assert end.row.model_dump(exclude_none=True) == {
        "row": "null_model",
        "call": "a.1",
        "reason": "schema_check_timed_out",
        "errors": [
            f"$: matching the pattern '^(a|a)*$' took longer than {CHECK_SECONDS:g} s",
        ],
        "tokens": Tokens(total=5).model_dump(),
    }
