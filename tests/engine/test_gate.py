"""The gate: which nodes are admitted within the pool, and each call's next attempt."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from unittest.mock import patch

from hypothesis import given
from hypothesis import strategies as st

from crw.engine.calls.gate import (
    MAX_ATTEMPTS,
    Admission,
    RunSpent,
    call_id,
    ceiling_reached,
    next_attempt,
    ready,
)
from crw.engine.config.workflow import Workflow
from crw.engine.config.workflow_graph import Graph
from crw.engine.config.workflow_nodes import Node
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


def workflow_of(nodes: list[Node]) -> Workflow:
    return Workflow(
        name="w", pool=8, verifier=None, nodes=tuple(nodes), path=Path("/w.toml"), digest="x"
    )


def copied(node_id: str, *needs: str) -> Node:
    """`node(node_id, *needs)` without validating its schema again (for big workflows)."""
    return SAMPLE.model_copy(update={"id": node_id, "needs": needs})


SAMPLE = node("sample")


def independent(n: int) -> Workflow:
    return workflow_of([copied(f"n{i}") for i in range(n)])


def chain(n: int) -> Workflow:
    return workflow_of([copied(f"n{i}", *([f"n{i - 1}"] if i else [])) for i in range(n)])


def drain_ids(admission: Admission, pool: int) -> list[str]:
    """Admit within `pool`, completing the oldest running call each time, until
    nothing is ready and nothing runs: the admitted ids, in order."""
    admitted: list[str] = []
    running: list[str] = []
    while True:
        fresh = [n.id for n in admission.admit(pool - len(running))]
        admitted += fresh
        running += fresh
        if not running:
            return admitted
        admission.completed(running.pop(0))


def test_admission_of_10000_independent_nodes_touches_each_a_bounded_number_of_times() -> None:
    """The gate admits a run of 10,000 calls in steps proportional to the nodes,
    and the workflow's order is computed once, not at each admission."""
    workflow = independent(10_000)
    with patch.object(Graph, "of", wraps=Graph.of) as computed:
        admission = Admission(workflow, set())
        admitted = drain_ids(admission, pool=8)
    assert admitted == [f"n{i}" for i in range(10_000)]
    assert computed.call_count == 1
    assert admission.steps <= 2 * 10_000


def test_admission_of_a_10000_node_chain_touches_each_need_a_bounded_number_of_times() -> None:
    workflow = chain(10_000)
    with patch.object(Graph, "of", wraps=Graph.of) as computed:
        admission = Admission(workflow, set())
        admitted = drain_ids(admission, pool=8)
    assert admitted == [f"n{i}" for i in range(10_000)]
    assert computed.call_count == 1
    assert admission.steps <= 3 * 10_000


def test_resumed_admission_counts_needs_from_the_replayed_results() -> None:
    """A resumed run's completed nodes count as done, its stopped nodes never run,
    and a node whose need stopped is never ready."""
    admission = Admission(WORKFLOW, {"explore"}, {"docs"})
    assert ids(admission.admit(4)) == ["build"]
    admission.completed("build")
    assert ids(admission.admit(4)) == ["review"]
    assert admission.admit(4) == []


def reference_admissions(workflow: Workflow, pool: int, finish: list[int]) -> list[list[str]]:
    """The admissions of the gate as it was: at each step the first free-many nodes
    of the order whose needs are all done; `finish[i]` picks which running call
    ends next."""
    order = list(workflow.order())
    done: set[str] = set()
    running: list[str] = []
    steps: list[list[str]] = []
    for pick in [*finish, *[0] * len(order)]:
        taken = done | set(running)
        fresh = [n.id for n in order if n.id not in taken and set(n.needs) <= done]
        fresh = fresh[: pool - len(running)]
        steps.append(fresh)
        running += fresh
        if not running:
            return steps
        done.add(running.pop(pick % len(running)))
    return steps


@given(
    needs=st.lists(st.sets(st.integers(0, 29), max_size=3), min_size=1, max_size=30),
    pool=st.integers(1, 5),
    finish=st.lists(st.integers(0, 10), max_size=40),
    data=st.data(),
)
def test_incremental_admission_admits_in_the_same_order_as_scanning_the_workflow(
    needs: list[set[int]], pool: int, finish: list[int], data: st.DataObject
) -> None:
    """Same workflow, same completions: the same calls admitted at each step. A
    node needs only nodes of a lower rank, placed anywhere in the file."""
    rank = data.draw(st.permutations(range(len(needs))))
    workflow = workflow_of(
        [
            node(f"n{i}", *sorted(f"n{j}" for j in deps if j < len(needs) and rank[j] < rank[i]))
            for i, deps in enumerate(needs)
        ]
    )
    admission = Admission(workflow, set())
    running: list[str] = []
    for expected in reference_admissions(workflow, pool, finish):
        fresh = [n.id for n in admission.admit(pool - len(running))]
        assert fresh == expected
        running += fresh
        if running:
            pick = finish[0] if finish else 0
            finish = finish[1:]
            admission.completed(running.pop(pick % len(running)))


def test_run_spent_is_kept_as_calls_count_not_summed_again() -> None:
    """spec: HARV-24: the gate asks the run's figure before each admission; a
    run of 2,000 calls costs a bounded number of token additions per call."""
    spent = RunSpent(before=Tokens(total=5))
    with patch.object(Tokens, "__add__", autospec=True, side_effect=Tokens.__add__) as added:
        for i in range(2000):
            spent.count(f"n{i}.1", Tokens(total=1))
            spent.count(f"n{i}.1", Tokens(total=2))
            assert spent.spent().total == 5 + 2 * (i + 1)
    assert added.call_count <= 2 * 2 * 2000
