"""Checking an answer against its schema is bounded in CPU time, every keyword: a
pattern that backtracks without end (`^(a|a)*$` against 30 characters takes hours
with `re`) or `uniqueItems` over thousands of objects (every pair compared) ends
the check after CHECK_SECONDS of its thread's CPU, and the call null_model."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from crw.engine.answers import answer, harvest
from crw.engine.answers.schema_check import CHECK_SECONDS, SchemaCheckTimedOut, check
from crw.host.protocol import Turn
from crw.journal.rows import Tokens
from tests.deadlines import LOADED

EVIL = "^(a|a)*$"
LONG = "a" * 30 + "!"
BOUND = 5.0
"""Seconds of the checking thread's CPU a test allows where the unbounded check
would take hours (CPU, as the budget is: wall time grows with the machine's load)."""

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
    began = time.thread_time()
    with pytest.raises(SchemaCheckTimedOut, match="took longer than"):
        check(result, schema)
    assert time.thread_time() - began < BOUND


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
    began = time.thread_time()
    with pytest.raises(SchemaCheckTimedOut):
        check([LONG] * 20, schema)
    # One bound per match would take 20 of them.
    assert time.thread_time() - began < BOUND < 20 * CHECK_SECONDS


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
    began = time.thread_time()
    end = harvest.decide("a.1", schema, turn, Tokens(total=5), repaired=False)
    assert time.thread_time() - began < BOUND
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


UNIQUE = {"type": "object", "properties": {"items": {"type": "array", "uniqueItems": True}}}
MANY = {"items": [{"id": i, "name": f"n{i}"} for i in range(6000)]}
"""6,000 small objects (about 100 KB): comparing every pair takes minutes."""
SLACK = 0.5
"""CPU seconds past the budget a stopped check may still spend (the watchdog wakes
when the budget could be spent, then at the next Python instruction)."""


def test_unique_items_over_thousands_of_objects_ends_the_check_within_its_budget() -> None:
    """spec: HARV-6 (each answer checked against its schema, in bounded time)"""
    began, cpu = time.monotonic(), time.thread_time()
    with pytest.raises(SchemaCheckTimedOut) as timed_out:
        check(MANY, UNIQUE)
    assert time.thread_time() - cpu < CHECK_SECONDS + SLACK
    assert time.monotonic() - began < LOADED  # CPU is the budget; wall time waits on the machine
    assert str(timed_out.value) == (
        f"checking the answer against its schema took longer than {CHECK_SECONDS:g} s"
    )


def test_unique_items_that_cannot_be_checked_in_time_ends_the_call_null_model() -> None:
    turn = Turn.model_validate(
        {
            "id": "t1",
            "status": "completed",
            "items": [{"type": "agentMessage", "id": "m", "text": json.dumps(MANY), "phase": None}],
        }
    )
    end = harvest.decide("a.1", UNIQUE, turn, Tokens(total=5), repaired=False)
    assert end.row is not None and end.pause is None and end.repair is None
    assert end.row.model_dump(exclude_none=True) == {
        "row": "null_model",
        "call": "a.1",
        "reason": "schema_check_timed_out",
        "errors": [
            f"$: checking the answer against its schema took longer than {CHECK_SECONDS:g} s"
        ],
        "tokens": Tokens(total=5).model_dump(),
    }


def test_a_small_array_of_objects_is_still_checked_for_unique_items() -> None:
    items = [{"id": i} for i in range(50)]
    assert check({"items": items}, UNIQUE) == []
    assert check({"items": [*items, {"id": 3}]}, UNIQUE) == [
        f"$.items: {[*items, {'id': 3}]!r} has non-unique elements"
    ]


@pytest.fixture
def cpu_hogs() -> Iterator[None]:
    """Two processes that spin, one per core of a two-core machine: the check's
    wall time stretches, its CPU budget must not."""
    hogs = [
        subprocess.Popen(
            [sys.executable, "-c", "while True: pass"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(2)
    ]
    try:
        yield
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


@pytest.mark.usefixtures("cpu_hogs")
def test_a_backtracking_pattern_stays_within_its_cpu_budget_on_a_busy_machine() -> None:
    began, cpu = time.monotonic(), time.thread_time()
    with pytest.raises(SchemaCheckTimedOut, match="took longer than"):
        check({"s": "a" * 41 + "!"}, SCHEMAS["pattern"][0])
    assert time.thread_time() - cpu < CHECK_SECONDS + SLACK
    assert time.monotonic() - began < LOADED  # a hang guard: CPU is the budget


def test_a_schema_that_refers_to_itself_without_end_is_unchecked_not_a_crash() -> None:
    with pytest.raises(SchemaCheckTimedOut, match="recursed without end"):
        check({"a": 1}, {"$ref": "#"})


def test_a_check_in_a_worker_thread_is_stopped_at_its_budget_all_the_same() -> None:
    raised: list[BaseException] = []

    def checking() -> None:
        try:
            check(MANY, UNIQUE)
        except SchemaCheckTimedOut as err:
            raised.append(err)

    worker = threading.Thread(target=checking)
    worker.start()
    worker.join(timeout=60)
    assert not worker.is_alive() and len(raised) == 1
