"""The Gate actor: admits calls within the pool and ends the run.

The gate admits a node once every node it needs has completed, within the pool,
in the workflow's order, and runs each admitted call as a Trio task through the
backend's `run_call`. A usage or rate limit pauses the run: a `paused` row is
written, nothing more is admitted, and the calls in flight finish. When nothing
more can run the run writes `ended` (completed when every node completed, else
failed: a null_model leaves the nodes that need it unrun), unless a call waits
for a decision (held) or the run paused.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import trio

from crw.actors.journal_writer import JournalWriter
from crw.engine import gate
from crw.engine.harvest import CallEnd
from crw.engine.workflow import Node, Workflow
from crw.journal.replay import TERMINAL_ROWS, RunState
from crw.journal.rows import Ended, Paused

RunCall = Callable[[Node, str, Mapping[str, Any]], Awaitable[CallEnd]]
"""Runs one call (node, call id, the results of its needs) to its end."""


def taken(replayed: RunState) -> tuple[dict[str, Any], dict[str, str]]:
    """From the rows: the completed nodes' results, and how each ended node ended."""
    results: dict[str, Any] = {}
    finished: dict[str, str] = {}
    for call in replayed.calls.values():
        if call.node is None:
            continue
        if call.state == "completed":
            results[call.node] = call.result
        if call.state in TERMINAL_ROWS:
            finished[call.node] = call.state
    return results, finished


async def run_gate(
    journal: JournalWriter,
    workflow: Workflow,
    pool: int,
    results: dict[str, Any],
    finished: dict[str, str],
    run_call: RunCall,
) -> str:
    """Run the calls the rows leave to run; returns the run's state as the process
    leaves it (ended, paused, waiting_decision)."""
    paused: str | None = None
    running: set[str] = set()
    send, receive = trio.open_memory_channel[tuple[str, CallEnd]](max(pool, 1))

    async def call_task(node: Node) -> None:
        needs = {need: results[need] for need in node.needs}
        await send.send((node.id, await run_call(node, gate.call_id(node.id, 1), needs)))

    async with trio.open_nursery() as nursery:
        while True:
            if paused is None:
                for node in gate.ready(workflow, set(results), running, pool, set(finished)):
                    running.add(node.id)
                    nursery.start_soon(call_task, node)
            if not running:
                break
            node_id, end = await receive.receive()
            running.discard(node_id)
            kind = (end.row.row if end.row is not None else None) or "held"
            finished[node_id] = kind
            if kind == "completed":
                results[node_id] = end.row.result  # type: ignore[union-attr]
            if end.pause is not None and paused is None:
                paused = end.pause
                await journal.commit([Paused(reason=end.pause)])
    if paused is not None:
        return "paused"
    if "held" in finished.values():
        return "waiting_decision"
    status = "completed" if len(results) == len(workflow.nodes) else "failed"
    state = {node.id: finished.get(node.id, "unrun") for node in workflow.nodes}
    await journal.commit([Ended(status=status, state=state)])
    return "ended"
