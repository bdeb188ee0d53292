"""The gate actor's admission at scale: each call costs the same however many the
run holds, on either backend (both run `run_gate`), and a resumed run goes on from
its replayed results."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any
from unittest.mock import patch

import crw.actors.gate as gate_actor
import crw.engine.calls.gate as gate_engine
from crw.actors.gate import run_gate
from crw.actors.journal_writer import open_journal_writer
from crw.clock import fixed_clock
from crw.engine.answers.harvest import CallEnd
from crw.engine.calls.gate import RunSpent
from crw.engine.config.workflow import Workflow
from crw.engine.config.workflow_nodes import Node
from crw.journal.log import read_journal
from crw.journal.rows import Completed, Tokens
from tests.engine.test_gate import chain, independent
from tests.steps import count_lines


async def run(
    tmp_path: Path,
    workflow: Workflow,
    results: dict[str, Any] | None = None,
    finished: dict[str, str] | None = None,
    name: str = "journal",
) -> tuple[str, list[str], list[dict[str, Any]]]:
    """Run the gate with calls that complete at once: the state it leaves, the
    calls it ran (in the order Trio ran their tasks), the rows."""
    ran: list[str] = []

    async def run_call(node: Node, call: str, needs: Mapping[str, Any]) -> CallEnd:
        assert set(needs) == set(node.needs)
        ran.append(call)
        return CallEnd(Completed(call=call, result={"n": node.id}, tokens=Tokens(total=1)))

    path = tmp_path / f"{name}.jsonl"
    async with open_journal_writer(path, clock=fixed_clock()) as journal:
        state = await run_gate(
            journal,
            workflow,
            8,
            results if results is not None else {},
            finished if finished is not None else {},
            run_call,
            RunSpent(),
        )
    return state, ran, read_journal(path).rows


async def test_gate_runs_10000_calls_without_computing_the_order_again(tmp_path: Path) -> None:
    """spec: GEN-5 (admission in the workflow's order, within the pool)"""
    workflow = independent(10_000)
    with patch.object(Workflow, "order", wraps=workflow.order) as order:
        state, ran, rows = await run(tmp_path, workflow)
    assert state == "ended" and rows[-1]["status"] == "completed"
    assert sorted(ran) == sorted(f"n{i}.1" for i in range(10_000))
    assert order.call_count == 0


async def test_gate_work_per_call_does_not_grow_with_the_run(tmp_path: Path) -> None:
    """The gate's lines executed grow in proportion to the calls (a chain and
    independent nodes), not with their square."""
    counted: dict[tuple[str, int], int] = {}
    for shape, make in (("independent", independent), ("chain", chain)):
        for n in (500, 2000):
            workflow = make(n)
            workflow.graph()
            with count_lines(gate_actor, gate_engine) as lines:
                state, ran, _ = await run(tmp_path, workflow, name=f"{shape}-{n}")
            assert state == "ended" and len(ran) == n
            counted[shape, n] = lines.n
    for shape in ("independent", "chain"):
        assert counted[shape, 2000] <= 4.4 * counted[shape, 500], counted


async def test_resumed_gate_counts_needs_from_the_replayed_results(tmp_path: Path) -> None:
    """A resumed run runs only what its rows leave: the completed half of a chain
    is not run again, the next node is admitted at once."""
    workflow = chain(1000)
    results: dict[str, Any] = {f"n{i}": {"n": f"n{i}"} for i in range(500)}
    finished = dict.fromkeys(results, "completed")
    state, ran, rows = await run(tmp_path, workflow, results, finished)
    assert state == "ended" and rows[-1]["status"] == "completed"
    assert ran == [f"n{i}.1" for i in range(500, 1000)]


async def test_resumed_gate_never_runs_a_node_whose_need_stopped(tmp_path: Path) -> None:
    workflow = chain(10)
    results: dict[str, Any] = {f"n{i}": {"n": f"n{i}"} for i in range(5)}
    finished = {**dict.fromkeys(results, "completed"), "n5": "null_model"}
    state, ran, rows = await run(tmp_path, workflow, results, finished)
    assert state == "ended" and ran == []
    assert rows[-1]["status"] == "failed" and rows[-1]["state"]["n6"] == "unrun"


async def test_the_gate_keeps_only_the_results_a_waiting_node_will_read(tmp_path: Path) -> None:
    """spec: GEN-5 (each call costs the same however many the run holds): a run
    holds the results its waiting nodes will read, not one for each call it ran
    (a 100,000-call run kept ~25 MB of results no node needed). Independent nodes
    keep none; a chain the one its next node reads, until that node is admitted;
    a resumed run drops the replayed results nothing waiting reads."""
    for workflow, at_most in ((independent(2000), 0), (chain(500), 1)):
        results: dict[str, Any] = {}
        held = await _held_at_each_call(tmp_path, workflow, results)
        assert len(held) == len(workflow.nodes)
        assert max(held) <= at_most and results == {}, (max(held), len(results))
    resumed = {f"n{i}": {"n": f"n{i}"} for i in range(500)}
    state, ran, _ = await run(tmp_path, chain(1000), resumed, dict.fromkeys(resumed, "completed"))
    assert state == "ended" and ran[0] == "n500.1" and resumed == {}


async def _held_at_each_call(
    tmp_path: Path, workflow: Workflow, results: dict[str, Any]
) -> list[int]:
    """Run the gate over `workflow` with calls that complete at once: how many
    results it held as each call began."""
    held: list[int] = []

    async def run_call(node: Node, call: str, needs: Mapping[str, Any]) -> CallEnd:
        assert set(needs) == set(node.needs)
        held.append(len(results))
        return CallEnd(Completed(call=call, result={"n": node.id}))

    async with open_journal_writer(tmp_path / "held.jsonl", clock=fixed_clock()) as journal:
        state = await run_gate(journal, workflow, 8, results, {}, run_call, RunSpent())
    assert state == "ended"
    return held
