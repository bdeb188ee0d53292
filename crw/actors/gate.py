"""The Gate actor: admits calls within the pool and ends the run.

The gate admits a node once every node it needs has completed, within the pool,
in the workflow's order (`gate.Admission`: a node joins the ready queue when its
last need completes, so an admission costs the same in a run of any size), and
runs each admitted call as a Trio task through the backend's `run_call`. A usage
or rate limit pauses the run: a `paused` row is written, nothing more is
admitted, and the calls in flight finish. So does the workflow's token ceiling,
when the run's figure (`RunSpent`) reached it before a call would be admitted:
the paused row records the figure and the ceiling. When nothing more can run the
run writes `ended` (completed when every node completed, else failed: a
null_model leaves the nodes that need it unrun), unless a call waits for a
decision (held) or the run paused.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import trio

from crw.actors.control import RunControl
from crw.actors.journal_writer import JournalWriter
from crw.engine.answers.harvest import CallEnd
from crw.engine.calls import gate
from crw.engine.config.inputs import INPUTS
from crw.engine.config.workflow import Workflow
from crw.engine.config.workflow_nodes import Node
from crw.engine.holds import interrupt
from crw.journal.rows import Paused, Tokens

RunCall = Callable[[Node, str, Mapping[str, Any]], Awaitable[CallEnd]]
"""Runs one call (node, call id, the results of its needs) to its end."""


async def run_gate(
    journal: JournalWriter,
    workflow: Workflow,
    pool: int,
    results: dict[str, Any],
    finished: dict[str, str],
    run_call: RunCall,
    spent: gate.RunSpent,
    control: RunControl | None = None,
    first: Mapping[str, int] | None = None,
    inputs: Mapping[str, Any] | None = None,
) -> str:
    """Run the calls the rows leave to run; returns the run's state as the process
    leaves it (ended, paused, waiting_decision). `spent` is the run's running token
    figure: each call's terminal row settles its part of it. Once `control` stops
    the run (a pause or cancellation), only the calls an earlier process left open
    are admitted, to be interrupted, and the run's own row ends it. `first`: the
    ordinal of a restarted node's new call (else its call is `<node>.1`). `inputs`:
    the run's inputs, which a task names as `{inputs.NAME}`."""
    paused: str | None = None
    running: set[str] = set()
    send, receive = trio.open_memory_channel[tuple[str, CallEnd]](max(pool, 1))

    async def call_task(node: Node, needs: dict[str, Any]) -> None:
        if inputs:
            needs[INPUTS] = inputs
        call = gate.call_id(node.id, (first or {}).get(node.id, 1))
        end = await run_call(node, call, needs)
        tokens = getattr(end.row, "tokens", None)
        if tokens is not None and node.review is None:
            spent.settle(call, tokens)  # the terminal row carries every token of the call
        # Never blocks: the buffer holds `pool` ends and at most `pool` calls run,
        # each sending once. A blocking send would be a schedule point of its own,
        # one more resume of the call's task for every call.
        send.send_nowait((node.id, end))

    admission = gate.Admission(workflow, results.keys(), finished.keys())
    for node_id in [node_id for node_id in results if not admission.needed(node_id)]:
        del results[node_id]  # a resumed run's: no node waiting to run reads them
    async with trio.open_nursery() as nursery:
        while True:
            if paused is None:
                admit = admission.admit(pool - len(running))
                if control is not None and control.reason is not None:
                    admit = [node for node in admit if node.id in control.open_nodes]
                if admit and gate.ceiling_reached(spent.spent(), workflow.token_ceiling):
                    paused = gate.TOKEN_CEILING
                    await journal.commit([_ceiling_row(spent.spent(), workflow.token_ceiling)])
                    admit = []
                for node in admit:
                    running.add(node.id)
                    nursery.start_soon(call_task, node, _take_needs(node, results, admission))
            if not running:
                break
            try:  # an end that came meanwhile: no schedule point of its own
                node_id, end = receive.receive_nowait()
            except trio.WouldBlock:
                node_id, end = await receive.receive()
            running.discard(node_id)
            kind = (end.row.row if end.row is not None else None) or "held"
            finished[node_id] = kind
            if kind == "completed":
                if admission.needed(node_id):  # else nothing reads it: not kept
                    results[node_id] = end.row.result  # type: ignore[union-attr]
                admission.completed(node_id)
            if end.pause is not None and paused is None:
                paused = end.pause
                await journal.commit([Paused(reason=end.pause)])
    if (
        control is not None
        and control.reason is not None
        and not gate.all_completed(workflow, finished)
    ):
        nodes = [node.id for node in workflow.nodes]
        ends = dict.fromkeys(control.held_before, "held") | finished
        await journal.commit(interrupt.run_rows(control.reason, control.request_id, nodes, ends))
        control.answered()
        return "paused" if control.reason == interrupt.PAUSED else "ended"
    return await _leave(journal, workflow, finished, paused)


def _take_needs(node: Node, results: dict[str, Any], admission: gate.Admission) -> dict[str, Any]:
    """The results of the needs of `node`, just admitted; a result no node waiting
    to run needs any more leaves `results` (a run holds the results its waiting
    nodes will read, not one a call it ran)."""
    needs = {need: results[need] for need in node.needs}
    for need in node.needs:
        if not admission.needed(need):
            results.pop(need, None)
    return needs


def _ceiling_row(spent: Tokens, ceiling: int | None) -> Paused:
    return Paused(
        reason=gate.TOKEN_CEILING,
        error=f"the run counted {spent.total} tokens, its token_ceiling is {ceiling}",
        tokens=spent,
        token_ceiling=ceiling,
    )


async def _leave(
    journal: JournalWriter, workflow: Workflow, finished: dict[str, str], paused: str | None
) -> str:
    """The run's state as the process leaves it; `ended` once nothing more can run."""
    if paused is not None:
        return "paused"
    if "held" in finished.values():
        return "waiting_decision"
    await journal.commit([gate.ended_row(workflow, finished)])
    return "ended"
