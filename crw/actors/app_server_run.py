"""The app-server backend's run: the gate, with a call actor that opens threads.

A process that starts over an existing journal takes the completed calls'
results as they are, and runs again (prepared anew) the calls a pause held: their
turn failed on the usage or rate limit, so no answer is lost or taken twice. A
call some earlier process left open (no terminal row) is held with reason
process_lost, never run again on its own: the app-server backend cannot tell what
the lost process's turn did, and a turn is never run twice without a decision.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from crw.actors.app_server_call import CallContext, run_app_server_call
from crw.actors.gate import run_gate, taken
from crw.engine.gate import RunSpent
from crw.engine.harvest import CallEnd
from crw.engine.workflow import Node
from crw.journal.replay import RunState
from crw.journal.rows import Held


async def run_app_server_calls(ctx: CallContext, pool: int, replayed: RunState) -> str:
    """Run the workflow's calls to the end the rows allow; returns the run's state
    as the process leaves it (ended, paused, waiting_decision)."""
    results, finished = taken(replayed)
    lost = []
    for call in replayed.calls.values():
        if call.node is None:
            continue
        if call.state == "held" and call.reason == "paused":
            del finished[call.node]
        elif call.state in ("prepared", "running", "waiting_session"):
            lost.append(Held(call=call.call, reason="process_lost"))
            finished[call.node] = "held"
    if lost:
        await ctx.journal.commit(lost)

    async def run_call(node: Node, call: str, needs: Mapping[str, Any]) -> CallEnd:
        return await run_app_server_call(ctx, node, call, needs)

    spent = RunSpent.of(replayed)
    return await run_gate(
        ctx.journal, ctx.workflow, pool, results, finished, run_call, spent, ctx.control
    )
