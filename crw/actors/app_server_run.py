"""The app-server backend's run: the gate, with a call actor that opens threads.

A process that starts over an existing journal takes the completed calls'
results as they are. A call some earlier process left open (no terminal row)
goes on in place, from its rows and the host's read of its thread
(`crw.engine.holds.app_resume`): a turn that completed while no process watched is
harvested, a running one is waited for, a turn never started is started once.
The calls a pause held (`crw flow pause`, a usage or rate limit) go on in place
too, as a held call answered retry does (`crw.engine.holds.app_held`): the turn the
pause stopped is taken again by a new turn on the call's thread, at the next k
and the same conversation place, never sent twice and no answer lost.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from crw.actors.app_server_context import CallContext
from crw.actors.app_server_life import run_app_server_call
from crw.actors.app_server_rounds import run_app_rounds
from crw.actors.gate import run_gate
from crw.engine.answers.harvest import CallEnd
from crw.engine.calls.gate import RunSpent, taken
from crw.engine.config.workflow_nodes import Node
from crw.engine.holds import interrupt
from crw.journal.replay import RunState


async def run_app_server_calls(
    ctx: CallContext, pool: int, replayed: RunState, rows: Sequence[Mapping[str, Any]] = ()
) -> str:
    """Run the workflow's calls to the end the rows allow; returns the run's state
    as the process leaves it (ended, paused, waiting_decision). `rows` are the
    journal's, `replayed` their replay."""
    results, finished = taken(replayed, ctx.workflow)
    ctx.control.held_before = tuple(interrupt.goes_on(replayed))
    for node in ctx.control.held_before:  # held by a pause: they go on in place
        finished.pop(node, None)  # a reviewed node's round is not over: it has none
    by_call: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for row in rows:
        if row.get("call"):
            by_call[row["call"]].append(row)
    spent = RunSpent.of(replayed)
    journal = list(rows)

    async def run_call(node: Node, call: str, needs: Mapping[str, Any]) -> CallEnd:
        if node.review is not None:  # the node's call, then its review rounds
            return await run_app_rounds(ctx, node, needs, by_call, journal, spent)
        return await run_app_server_call(ctx, node, call, needs, by_call.get(call, ()))

    return await run_gate(
        ctx.journal,
        ctx.workflow,
        pool,
        results,
        finished,
        run_call,
        spent,
        ctx.control,
        inputs=ctx.inputs,
    )
