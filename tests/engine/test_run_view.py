"""The per-call records and the run's outcome, from the rows a run writes."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from crw.engine.views.counts import counts
from crw.engine.views.run_view import call_views, outcome
from crw.journal.replay import replay


def _at(second: int) -> str:
    return f"2026-11-30T10:00:{second:02d}.000000Z"


ROWS: list[dict[str, Any]] = [
    {"seq": 1, "at": _at(0), "row": "started", "backend": "session"},
    {"seq": 2, "at": _at(1), "row": "prepared", "call": "a.1", "node": "a", "role": "explorer"},
    {"seq": 3, "at": _at(2), "row": "prepared", "call": "b.1", "node": "b", "role": "executor"},
    {"seq": 4, "at": _at(3), "row": "step_published", "call": "a.1", "k": 1, "attempt": 1},
    {"seq": 5, "at": _at(4), "row": "turn_started", "call": "a.1", "k": 1},
    {
        "seq": 6,
        "at": _at(9),
        "row": "completed",
        "call": "a.1",
        "result": {"ok": True},
        "tokens": {"input": 7, "total": 10},
    },
    {
        "seq": 7,
        "at": _at(12),
        "row": "null_model",
        "call": "b.1",
        "reason": "schema_invalid_after_repair",
        "tokens": {"total": 4},
    },
]


def test_each_call_has_its_times_duration_reason_and_answer() -> None:
    views = call_views(replay(ROWS))
    a, b = views
    assert (a.call, a.node, a.role, a.state, a.attempt, a.turns) == (
        "a.1",
        "a",
        "explorer",
        "completed",
        1,
        1,
    )
    assert (a.started_at, a.ended_at, a.seconds) == (_at(1), _at(9), 8.0)
    assert a.tokens["total"] == 10 and a.result == {"ok": True}
    assert (b.state, b.reason, b.seconds) == ("null_model", "schema_invalid_after_repair", 10.0)


def test_a_call_not_ended_lasts_until_now() -> None:
    now = datetime(2026, 11, 30, 10, 0, 30, tzinfo=UTC)
    (a, _) = call_views(replay(ROWS[:5]), now)
    assert (a.state, a.ended_at, a.seconds) == ("running", None, 29.0)


def test_an_ended_run_names_its_status_and_the_nodes_that_did_not_complete() -> None:
    ended = {
        "seq": 8,
        "at": _at(13),
        "row": "ended",
        "status": "failed",
        "state": {"a": "completed", "b": "null_model", "c": "unrun"},
    }
    run = replay([*ROWS, ended])
    view = outcome(run)
    assert (view.state, view.reason) == ("ended", "failed")
    assert view.unfinished == {"b": "null_model", "c": "unrun"}
    assert (counts(run).done, counts(run).total) == (2, 2)  # the calls it ran
    assert (counts(run).nodes_completed, counts(run).nodes) == (1, 3)
    assert (run.started_at, run.last_at) == (_at(0), _at(13))


def test_a_paused_run_names_its_reason_and_a_held_call_is_not_done() -> None:
    held = {"seq": 8, "at": _at(13), "row": "held", "call": "b.1", "reason": "paused"}
    paused = {
        "seq": 9,
        "at": _at(14),
        "row": "paused",
        "reason": "write_failed",
        "file": "/x/steps/b.1",
        "error": "disk full",
    }
    run = replay([*ROWS[:6], held, paused])
    view = outcome(run)
    assert (view.state, view.reason) == ("paused", "write_failed: /x/steps/b.1: disk full")
    counted = counts(run)
    assert view.held == [] and (counted.done, counted.total) == (1, 2)  # b.1 goes on
    assert (counted.held, counted.in_flight) == (1, ())  # a paused run has none in flight
    plan = {"a": 1, "b": 1, "c": 1, "d": 2}
    assert counts(run, plan).total == 5  # c's call, d's call and its review to come


def test_a_run_waiting_on_a_decision_names_its_held_calls() -> None:
    held = {"seq": 8, "at": _at(13), "row": "held", "call": "b.1", "reason": "host_failure"}
    view = outcome(replay([*ROWS[:6], held]))
    assert (view.state, view.reason, view.held) == ("waiting_decision", None, ["b.1"])
