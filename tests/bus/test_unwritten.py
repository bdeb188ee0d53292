"""The step_unwritten cadence: which rows a step that cannot be written records."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crw.bus.unwritten import UnwrittenTracker, is_warning_count
from crw.journal.rows import StepUnwritten, dump_row


def stamp(n: int) -> str:
    return f"2026-01-01T00:00:00.{n:06d}Z"


def tracker() -> UnwrittenTracker:
    return UnwrittenTracker(call="build.1", k=2, attempt=1, action="send_input")


def fail(track: UnwrittenTracker, times: int) -> list[StepUnwritten]:
    rows = [track.failed(stamp(n), f"ENOSPC {n}") for n in range(1, times + 1)]
    return [row for row in rows if row is not None]


def test_first_failure_writes_the_warning_with_its_members() -> None:
    """spec: STEP-31, STEP-34"""
    row = tracker().failed("2026-01-01T00:00:01.000000Z", "No space left on device")
    assert row is not None
    assert dump_row(row) == {
        "row": "step_unwritten",
        "call": "build.1",
        "marker": "build.1/t2-a1",
        "k": 2,
        "attempt": 1,
        "action": "send_input",
        "input_state": "not_delivered",
        "error": "No space left on device",
        "failures": 1,
        "first_at": "2026-01-01T00:00:01.000000Z",
        "last_at": "2026-01-01T00:00:01.000000Z",
    }


def test_warnings_fall_at_the_1st_10th_and_100th_failure() -> None:
    """spec: STEP-34"""
    track = tracker()
    rows = fail(track, 150)
    assert [row.failures for row in rows] == [1, 10, 100]
    assert all(row.written is None for row in rows)
    assert rows[2].first_at == stamp(1) and rows[2].last_at == stamp(100)
    assert rows[2].error == "ENOSPC 100"


@pytest.mark.parametrize(
    ("count", "warns"),
    [
        (0, False),
        (1, True),
        (2, False),
        (9, False),
        (10, True),
        (11, False),
        (20, False),
        (99, False),
        (100, True),
        (101, False),
        (110, False),
        (1000, True),
        (10**6, True),
    ],
)
def test_warning_counts(count: int, warns: bool) -> None:
    """spec: STEP-34"""
    assert is_warning_count(count) is warns


@given(st.integers(min_value=-5, max_value=10**7))
def test_warning_count_is_a_power_of_ten(count: int) -> None:
    """spec: STEP-34: the 1st, 10th, 100th, ... failure and no other."""
    powers = {10**e for e in range(8)}
    assert is_warning_count(count) is (count in powers)


@given(st.integers(min_value=1, max_value=3000))
def test_step_written_after_any_failures_closes_with_written_true(failures: int) -> None:
    """spec: STEP-34, STEP-35"""
    track = tracker()
    warnings = fail(track, failures)
    assert [row.failures for row in warnings] == [n for n in (1, 10, 100, 1000) if n <= failures]
    closing = track.written()
    assert closing is not None and closing.written is True
    assert closing.failures == failures
    assert closing.first_at == stamp(1) and closing.last_at == stamp(failures)
    assert closing.error == f"ENOSPC {failures}"
    assert closing.input_state == "not_delivered" and closing.marker == "build.1/t2-a1"


@given(st.integers(min_value=1, max_value=3000))
def test_turn_ended_unwritten_after_any_failures_closes_with_written_false(
    failures: int,
) -> None:
    """spec: STEP-36"""
    track = tracker()
    fail(track, failures)
    closing = track.turn_ended()
    assert closing is not None and closing.written is False
    assert closing.failures == failures


def test_step_written_at_once_writes_no_row() -> None:
    """spec: STEP-35: only a step that had a warning closes."""
    track = tracker()
    assert track.written() is None
    assert track.turn_ended() is None


def test_one_closing_row_only() -> None:
    """spec: STEP-35"""
    track = tracker()
    fail(track, 3)
    assert track.written() is not None
    assert track.written() is None
    assert track.turn_ended() is None


def test_failures_after_a_closing_row_count_from_one_again() -> None:
    """A step written, then retracted and failing again, warns at its 1st failure."""
    track = tracker()
    fail(track, 12)
    track.written()
    row = track.failed("2026-01-02T00:00:00.000000Z", "EIO")
    assert row is not None
    assert row.failures == 1 and row.first_at == "2026-01-02T00:00:00.000000Z"


@given(st.lists(st.sampled_from(["fail", "written", "ended"]), max_size=200))
def test_every_warned_run_of_failures_closes_exactly_once(events: list[str]) -> None:
    """spec: STEP-34, STEP-35, STEP-36: any sequence of failures and ends."""
    track = tracker()
    pending = 0
    for n, event in enumerate(events):
        if event == "fail":
            pending += 1
            row = track.failed(stamp(n), "ENOSPC")
            assert (row is not None) is is_warning_count(pending)
            assert row is None or (row.written is None and row.failures == pending)
            continue
        closing = track.written() if event == "written" else track.turn_ended()
        if pending == 0:
            assert closing is None
        else:
            assert closing is not None and closing.failures == pending
            assert closing.written is (event == "written")
        pending = 0
