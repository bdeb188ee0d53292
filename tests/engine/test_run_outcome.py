"""The outcome `crw flow wait` ends on, its exit code, and each node's final answer
(`crw.engine.views.run_outcome`), from rows folded by replay."""

from __future__ import annotations

from typing import Any

import pytest

from crw.engine.views.run_outcome import NodeAnswer, exit_code, node_answers, settled
from crw.journal.replay import replay

STARTED = {"row": "started", "backend": "session"}


def prepared(call: str) -> dict[str, Any]:
    return {"row": "prepared", "call": call, "node": call.rpartition(".")[0]}


def completed(call: str, result: Any) -> list[dict[str, Any]]:
    return [prepared(call), {"row": "completed", "call": call, "result": result}]


def ended(status: str, **state: str) -> dict[str, Any]:
    return {"row": "ended", "status": status, "state": state}


@pytest.mark.parametrize(
    ("rows", "live", "outcome", "code"),
    [
        ([ended("completed")], False, "completed", 0),
        ([ended("completed")], True, "completed", 0),  # its process still cleans up
        ([ended("failed")], False, "failed", 1),
        ([ended("cancelled")], False, "cancelled", 5),
        ([ended("a_later_status")], False, "a_later_status", 1),
        ([prepared("a.1"), {"row": "decision", "call": "a.1", "choice": "abort"}], False,
         "aborted", 1),
        ([prepared("a.1"), {"row": "held", "call": "a.1", "reason": "host_failure"}], False,
         "waiting_decision", 3),
        ([{"row": "paused", "reason": "paused"}], False, "paused", 4),
    ],
)  # fmt: skip
def test_an_outcome_a_waiter_ends_on_and_its_exit_code(
    rows: list[dict[str, Any]], live: bool, outcome: str, code: int
) -> None:
    run = replay([STARTED, *rows])
    assert settled(run, live) == outcome
    assert exit_code(outcome) == code


@pytest.mark.parametrize(
    "rows",
    [
        [],  # no started row yet: the start hands over
        [prepared("a.1")],  # running
        [prepared("a.1"), {"row": "step_published", "call": "a.1", "k": 1}],  # waiting_session
        [prepared("a.1"), {"row": "held", "call": "a.1"}],  # the process drains other calls
        [{"row": "paused", "reason": "paused"}],  # the process is letting the run go
    ],
)
def test_a_live_run_not_ended_is_waited_on(rows: list[dict[str, Any]]) -> None:
    assert settled(replay([STARTED, *rows]), live=True) is None


@pytest.mark.parametrize("rows", [[], [prepared("a.1")]])
def test_a_run_whose_process_died_has_not_ended_and_is_waited_on(
    rows: list[dict[str, Any]],
) -> None:
    assert settled(replay([STARTED, *rows]), live=False) is None
    assert settled(replay(rows), live=False) is None  # a launch that never came up


def test_the_timeout_exits_124() -> None:
    assert exit_code("timeout") == 124


def test_each_node_s_answer_is_its_call_s_or_the_one_its_accepting_review_judged() -> None:
    rows = [
        STARTED,
        *completed("explore.1", {"files": ["a"]}),
        *completed("build.1", {"summary": "first"}),
        *completed("build.2", {"verdict": "reject", "findings": ["x"]}),
        *completed("build.3", {"summary": "fixed"}),
        *completed("build.4", {"verdict": "accept", "findings": []}),
        prepared("test.1"),
        {"row": "null_model", "call": "test.1", "reason": "schema_invalid_after_repair"},
        ended("failed", explore="completed", build="completed", test="null_model", ship="unrun"),
    ]
    assert node_answers(replay(rows)) == [
        NodeAnswer("explore", "completed", "explore.1", {"files": ["a"]}),
        NodeAnswer("build", "completed", "build.3", {"summary": "fixed"}),
        NodeAnswer("test", "null_model", None, None),
        NodeAnswer("ship", "unrun", None, None),
    ]


def test_a_restarted_node_s_answer_is_its_new_call_s() -> None:
    """A restart (spec: ATT-36) starts the node's chain again at the call its
    decision names: the chain before it is not the node's."""
    rows = [
        STARTED,
        *completed("build.1", {"summary": "first"}),
        *completed("build.2", {"verdict": "reject", "findings": ["x"]}),
        *completed("build.3", {"summary": "fix"}),
        prepared("build.4"),
        {"row": "held", "call": "build.4", "reason": "review_rejected"},
        {"row": "decision", "call": "build.4", "choice": "restart", "by": "build.5"},
        {"row": "superseded", "call": "build.4", "by": "build.5"},
        *completed("build.5", {"summary": "again"}),
        ended("completed", build="completed"),
    ]
    assert node_answers(replay(rows)) == [
        NodeAnswer("build", "completed", "build.5", {"summary": "again"})
    ]


def test_an_aborted_run_s_nodes_end_as_their_newest_call() -> None:
    """An abort writes no ended row: each node's end is its newest call's state,
    a review round it cut short unfinished."""
    rows = [
        STARTED,
        *completed("explore.1", {"files": []}),
        *completed("build.1", {"summary": "first"}),
        *completed("build.2", {"verdict": "reject", "findings": ["x"]}),
        prepared("test.1"),
        {"row": "held", "call": "test.1", "reason": "host_failure"},
        {"row": "decision", "call": "test.1", "choice": "abort"},
    ]
    assert node_answers(replay(rows)) == [
        NodeAnswer("explore", "completed", "explore.1", {"files": []}),
        NodeAnswer("build", "unfinished", None, None),
        NodeAnswer("test", "held", None, None),
    ]
