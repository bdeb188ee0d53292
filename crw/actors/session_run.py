"""The session backend's run: the gate, with a SessionCall per admitted call.

A resumed process goes on with each open call in place, from the call's last row
(ATT-16): its rows are handed to its actor. Completed calls keep their results; a
call held or ended null_model stays so. A report no call actor waits for is
answered here (`answer_unrouted`), reading the host only for a subagent its call
never bound. A node answered restart runs as its new call,
once the call it gives up on is superseded (`crw.actors.supersede`, ATT-36).
While the calls run, a duplicate spawned for an ended call's step is closed
(`crw.actors.late_strays`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import trio

from crw.actors import late_strays
from crw.actors.gate import run_gate
from crw.actors.review_rounds import run_rounds
from crw.actors.session_call import SessionCall
from crw.actors.session_context import SessionContext
from crw.actors.supersede import supersede_call
from crw.bus import steps as bus
from crw.bus.inbox import Report
from crw.engine.answers.harvest import CallEnd
from crw.engine.calls.gate import RunSpent, taken
from crw.engine.config.workflow_nodes import Node
from crw.engine.holds import interrupt, supersede
from crw.engine.steps.bind_v2 import late_agent, late_v2
from crw.engine.steps.replies import CallRecords, decide_late, reads_host
from crw.engine.steps.task_name import ROOT
from crw.host.errors import HostRequestError, unknown_thread
from crw.host.protocol import Thread
from crw.host.transport import HostUnavailable
from crw.journal.replay import TERMINAL_ROWS, RunState

ChildAt = Callable[[str], Awaitable[tuple[str | None, str | None]]]
"""Multi-agent v2: the thread id of the owner's child at a path (`/root/<name>`),
else None and why the owner's thread could not be read (`step_binder_v2.owner_child`)."""


async def answer_unrouted(
    records: CallRecords,
    read: Callable[[str], Awaitable[Thread]],
    report: Report,
    child_at: ChildAt | None = None,
) -> dict[str, Any] | None:
    """The reply to a report no call actor waits for (the reply table), from the
    calls' `records` the run keeps as it commits, or None: it names the step its
    call waits on, whose actor has not come to it yet (a resumed run's first read
    of its inbox), and waits in the inbox for that actor (ATT-18). A subagent the
    call never bound is `read` on the host first: another run's is refused. On v2
    (`child_at`) a report naming a child's path is of the thread the owner's
    thread names at that path: the host reads no path as a thread id (codex
    refuses it `invalid thread id`), and the rows know the thread by its id."""
    record = records.record(report.call)
    if record.waits_on(report.attempt, report.k):
        return None
    thread: Thread | None = None
    host_error: str | None = None
    agent = late_agent(report.run, report, record)  # v2: the bound child's path is its id
    if child_at is not None and agent and agent.startswith(ROOT) and report.failed is None:
        found, host_error = await child_at(agent)
        if found is None and host_error is None:
            host_error = f"the owner's thread names no child {agent} yet"
        agent = found or agent
    if host_error is None and reads_host(agent, record, report.failed):
        thread, host_error = await _read_late(read, str(agent))
    reply = decide_late(
        report.k,
        report.attempt,
        agent,
        record,
        report.failed,
        run=report.run,
        thread=thread,
        host_error=host_error,
    )
    agent = report.agent_id or ""
    path = (
        thread.agent_path if thread is not None else agent if agent.startswith("/root/") else None
    )
    reply = late_v2(reply, report.run, report, path)  # multi-agent v2's names (DISP-10)
    return {"reply": reply.kind, "reason": reply.reason}


async def _read_late(
    read: Callable[[str], Awaitable[Thread]], agent: str
) -> tuple[Thread | None, str | None]:
    """The subagent's snapshot, or why the host cannot answer now (None, None: the
    host has no such thread). A host gone is answered retry here: the call actors
    pause the run for it."""
    try:
        return await read(agent), None
    except HostUnavailable as err:
        return None, str(err)
    except HostRequestError as err:
        return (None, None) if unknown_thread(err) else (None, str(err))


async def run_session_calls(
    ctx: SessionContext, pool: int, replayed: RunState, rows: list[dict[str, Any]]
) -> str:
    """Run the workflow's calls to the end the rows allow; returns the run's state."""
    by_call: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        if row.get("call"):
            by_call[row["call"]].append(row)
    restarts = supersede.restarts(rows)
    first = {node: restart.ordinal for node, restart in restarts.items()}
    results, finished = taken(replayed, ctx.workflow, first)
    ctx.control.held_before = tuple(interrupt.goes_on(replayed))
    for node in ctx.control.held_before:  # held by a pause: they run again
        finished.pop(node, None)  # a reviewed node's round is not over: it has none
    ctx.control.open_nodes = interrupt.open_nodes(replayed)
    await close_left_open(ctx, replayed)

    spent = RunSpent.of(replayed)

    journal = list(rows)

    async def run_call(node: Node, call: str, needs: Mapping[str, Any]) -> CallEnd:
        restart = restarts.pop(node.id, None)
        if restart is not None and not restart.done:  # ATT-36: before the new call
            ended = await supersede_call(ctx, restart, by_call[restart.call])
            if ended.tokens is not None:  # the dead process's, in no terminal row (HARV-22)
                spent.count(restart.call, ended.tokens)
        if node.review is not None:  # the node's call, then its review rounds
            return await run_rounds(
                ctx, node, needs, by_call, journal, spent, first.get(node.id, 1)
            )
        return await SessionCall(ctx, node, call, needs, by_call[call], spent).run()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(late_strays.sweep, ctx)  # duplicates of ended calls' steps
        state = await run_gate(
            ctx.journal,
            ctx.workflow,
            pool,
            results,
            finished,
            run_call,
            spent,
            ctx.control,
            first,
            inputs=ctx.inputs,
        )
        nursery.cancel_scope.cancel()
    return state


async def close_left_open(ctx: SessionContext, replayed: RunState) -> None:
    """A call whose process died right after its terminal row never published its
    subagent's close step (HARV-56): publish it now, when the host still lists the
    subagent loaded. One listing of the owner's subagents answers for every ended
    call, however many there are. On multi-agent v2 no call closes its subagent.
    """
    if ctx.multi_agent == "multi_agent_v2":
        return
    ended = {
        call.thread_id: call
        for call in replayed.calls.values()
        if call.state in TERMINAL_ROWS and call.thread_id
    }
    if not ended:
        return
    try:
        loaded = await ctx.reader.loaded_subagents(ctx.owner)
    except (HostUnavailable, HostRequestError):
        return
    for thread_id in sorted(loaded & ended.keys()):
        call = ended[thread_id]
        await trio.to_thread.run_sync(
            bus.write_close, ctx.run, call.call, call.attempt or 1, thread_id
        )
