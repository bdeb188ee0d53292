"""The app-server backend's run loop: the gate admits calls, each runs as a task.

The gate admits a node once every node it needs has completed, within the pool.
Each admitted call is one Trio task (`run_app_server_call`) that reports its end
on a memory channel. A usage or rate limit pauses the run: its call is held
(reason paused), a `paused` row is written, nothing more is admitted, and the
calls in flight finish. The run writes `ended` when nothing more can run and no
call waits for a decision: status completed when every node completed, else
failed (a null_model leaves the nodes that need it unrun).

A process that starts over an existing journal takes the completed calls'
results as they are, and runs again (prepared anew) the calls a pause held: their
turn failed on the usage or rate limit, so no answer is lost or taken twice. A
call some earlier process left open (no terminal row) is held with reason
process_lost, never run again on its own: the app-server backend cannot tell what
the lost process's turn did, and a turn is never run twice without a decision.
"""

from __future__ import annotations

from typing import Any

import trio

from crw.actors.app_server_call import CallContext, run_app_server_call
from crw.engine import gate
from crw.engine.harvest import CallEnd
from crw.journal.replay import RunState
from crw.journal.rows import Ended, Held, Paused


async def run_app_server_calls(ctx: CallContext, pool: int, replayed: RunState) -> str:
    """Run the workflow's calls to the end the rows allow; returns the run's state
    as the process leaves it (ended, paused, waiting_decision)."""
    workflow = ctx.workflow
    results: dict[str, Any] = {}
    finished: dict[str, str] = {}
    lost = []
    for call in replayed.calls.values():
        if call.node is None:
            continue
        if call.state == "completed":
            results[call.node] = call.result
            finished[call.node] = "completed"
        elif call.state == "held" and call.reason == "paused":
            continue
        elif call.state in ("prepared", "running", "waiting_session"):
            lost.append(Held(call=call.call, reason="process_lost"))
            finished[call.node] = "held"
        else:
            finished[call.node] = call.state
    if lost:
        await ctx.journal.commit(lost)

    paused: str | None = None
    running: set[str] = set()
    send, receive = trio.open_memory_channel[tuple[str, CallEnd]](max(pool, 1))
    async with trio.open_nursery() as nursery:
        while True:
            if paused is None:
                for node in gate.ready(workflow, set(results), running, pool, set(finished)):
                    running.add(node.id)
                    nursery.start_soon(_call_task, ctx, node.id, results, send)
            if not running:
                break
            node_id, end = await receive.receive()
            running.discard(node_id)
            kind = end.row.row if end.row is not None else "held"  # type: ignore[attr-defined]
            finished[node_id] = kind
            if kind == "completed":
                results[node_id] = end.row.result  # type: ignore[union-attr]
            if end.pause is not None and paused is None:
                paused = end.pause
                await ctx.journal.commit([Paused(reason=end.pause)])
    if paused is not None:
        return "paused"
    if "held" in finished.values():
        return "waiting_decision"
    complete = len(results) == len(workflow.nodes)
    status = "completed" if complete else "failed"
    state = {node.id: finished.get(node.id, "unrun") for node in workflow.nodes}
    await ctx.journal.commit([Ended(status=status, state=state)])
    return "ended"


async def _call_task(
    ctx: CallContext,
    node_id: str,
    results: dict[str, Any],
    send: trio.MemorySendChannel[tuple[str, CallEnd]],
) -> None:
    node = ctx.workflow.node(node_id)
    needs = {need: results[need] for need in node.needs}
    end = await run_app_server_call(ctx, node, gate.call_id(node_id, 1), needs)
    await send.send((node_id, end))
