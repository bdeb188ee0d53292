"""The gate: which nodes are admitted within the pool, and each call's next attempt."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from crw.engine.gate import (
    MAX_ATTEMPTS,
    RunSpent,
    call_id,
    ceiling_reached,
    next_attempt,
    ready,
)
from crw.engine.workflow import Node, Workflow
from crw.journal.replay import replay
from crw.journal.rows import Tokens


def node(node_id: str, *needs: str) -> Node:
    return Node.model_validate(
        {"id": node_id, "role": "explorer", "task": "Look.", "schema": {}, "needs": needs}
    )


# explore -> build -> review; docs needs nothing; ship needs build and docs.
WORKFLOW = Workflow(
    name="w",
    pool=4,
    verifier=None,
    nodes=(
        node("build", "explore"),
        node("explore"),
        node("docs"),
        node("review", "build"),
        node("ship", "build", "docs"),
    ),
    path=Path("/repo/w.toml"),
    digest="sha256:0",
)


def ids(nodes: list[Node]) -> list[str]:
    return [n.id for n in nodes]


def test_nodes_without_needs_are_ready_in_workflow_order() -> None:
    """spec: GEN-5 (the gate admits session calls as any call)"""
    assert ids(ready(WORKFLOW, set(), set(), pool=4)) == ["explore", "docs"]


def test_node_is_ready_once_every_need_is_done() -> None:
    assert ids(ready(WORKFLOW, {"explore"}, set(), pool=4)) == ["build", "docs"]
    assert ids(ready(WORKFLOW, {"explore", "build"}, {"docs"}, pool=4)) == ["review"]
    assert ids(ready(WORKFLOW, {"explore", "build", "docs"}, set(), pool=4)) == ["review", "ship"]


def test_done_and_running_nodes_are_not_admitted_again() -> None:
    assert ready(WORKFLOW, {"explore", "docs", "build", "review", "ship"}, set(), pool=4) == []
    assert ids(ready(WORKFLOW, set(), {"explore"}, pool=4)) == ["docs"]


def test_admission_stays_within_the_pools_free_slots() -> None:
    assert ids(ready(WORKFLOW, set(), set(), pool=1)) == ["explore"]
    assert ids(ready(WORKFLOW, {"explore"}, {"docs"}, pool=2)) == ["build"]
    assert ready(WORKFLOW, {"explore"}, {"docs", "x"}, pool=2) == []
    assert ready(WORKFLOW, set(), {"a", "b", "c"}, pool=2) == []


def test_call_has_three_attempts_then_is_held_attempts_exhausted() -> None:
    assert MAX_ATTEMPTS == 3
    assert [next_attempt(n) for n in range(5)] == [1, 2, 3, None, None]
    assert next_attempt(1, max_attempts=1) is None


def test_call_id_is_the_node_and_its_ordinal() -> None:
    assert call_id("build", 1) == "build.1"
    assert call_id("build", 12) == "build.12"


def test_run_spent_starts_from_the_terminal_rows_and_counts_each_call_once() -> None:
    """spec: HARV-22, HARV-24: a call's tokens taken from its step_published row,
    then its later turns, then its terminal row: the figure holds them once."""
    rows: list[dict[str, Any]] = [
        {"row": "started", "backend": "session"},
        {"row": "completed", "call": "explore.1", "tokens": {"input": 100, "total": 110}},
        {"row": "step_published", "call": "build.1", "call_tokens": {"input": 50, "total": 55}},
    ]
    spent = RunSpent.of(replay(rows))
    assert spent.spent() == Tokens(input=100, total=110)
    spent.count("build.1", Tokens(input=50, total=55))  # taken from step_published
    assert spent.spent() == Tokens(input=150, total=165)
    spent.count("build.1", Tokens(input=120, total=130))  # its repair turn measured
    spent.count("build.1", Tokens(input=120, total=130))  # its terminal row
    assert spent.spent() == Tokens(input=220, total=240)


def test_ceiling_is_reached_at_its_total_and_never_without_one() -> None:
    """spec: HARV-27"""
    assert not ceiling_reached(Tokens(total=10**9), None)
    assert not ceiling_reached(Tokens(total=99, input=500), 100)
    assert ceiling_reached(Tokens(total=100), 100)
