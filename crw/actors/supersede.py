"""A restarted call is superseded once its subagents run nothing (ATT-36).

The judgement is `crw.engine.holds.supersede.judge` over the call's rows and the host's
snapshots of its subagents; this module acts on it, each row durable before its
effect:

    (retract)            every step file of the call still waiting
    (look up)            the subagents that carry a waiting spawn step's marker
    interrupt_requested  (reason restart, op, attempt, turn_id), then turn/interrupt,
                         and the thread read until it is no longer active
    superseded {by}      then each old subagent's close step, and its worktree
                         released (`crw.workspace.placer`)

Only then does the node's new call write its prepared row.
"""

from __future__ import annotations

from collections.abc import MutableSequence
from typing import TYPE_CHECKING, Any

import trio

from crw.actors import evidence_records
from crw.bus import steps as bus
from crw.engine.holds import supersede
from crw.host.errors import HostRequestError, unknown_thread
from crw.host.protocol import Thread
from crw.host.transport import HostUnavailable
from crw.journal.rows import RowModel, Superseded
from crw.workspace.placer import release_all

if TYPE_CHECKING:
    from crw.actors.session_context import SessionContext

Rows = MutableSequence[dict[str, Any]]


async def supersede_call(ctx: SessionContext, restart: supersede.Restart, rows: Rows) -> Superseded:
    """Make every subagent of `restart.call` run nothing, then write its superseded
    row and return it; `rows` (the call's rows) gets the rows committed."""
    waiting = supersede.waiting_steps(rows)
    for step in waiting:
        await trio.to_thread.run_sync(
            bus.retract_step, ctx.run, restart.call, int(step.get("k") or 1), _attempt(step)
        )
    agents = list(supersede.subagents(rows))
    for step in waiting:
        if step.get("action") != "send_input":
            agents += [t.id for t in await _carrying(ctx, str(step.get("marker") or ""))]
    agents = list(dict.fromkeys(agents))
    interrupted: set[str] = set()
    while True:
        threads = {agent: await _read(ctx, agent) for agent in agents}
        verdict = supersede.judge(restart, rows, threads, interrupted)
        if isinstance(verdict, supersede.Supersede):
            await _commit(ctx, rows, [verdict.row])
            await evidence_records.release(ctx.run_id, restart.call, rows)
            for attempt, agent in verdict.closes:
                await trio.to_thread.run_sync(
                    bus.write_close, ctx.run, restart.call, attempt, agent
                )
            if ctx.placer is not None:
                await trio.to_thread.run_sync(release_all, ctx.placer, list(rows))
            return verdict.row
        if isinstance(verdict, supersede.Interrupt):
            await _commit(ctx, rows, [verdict.row])  # the intent is durable first
            interrupted.add(str(verdict.row.turn_id))
            await _interrupt(ctx, verdict.thread_id, str(verdict.row.turn_id))
        else:
            await trio.sleep(ctx.settings.poll_interval)


async def _commit(ctx: SessionContext, rows: Rows, new: list[RowModel]) -> None:
    await ctx.journal.commit(new)
    committed = [row.model_dump() for row in new]
    rows.extend(committed)
    ctx.records.add(committed)


async def _carrying(ctx: SessionContext, marker: str) -> list[Thread]:
    """The owner's subagents that took the step `marker` names (the marker lookup)."""
    try:
        return await ctx.reader.spawned(ctx.owner, marker)
    except HostRequestError:
        return []


async def _read(ctx: SessionContext, thread_id: str) -> Thread | None:
    """The subagent as the host shows it; None when the host does not know it (it
    runs nothing). A host that went away pauses the run: a resume supersedes then."""
    try:
        return await ctx.reader.read(thread_id)
    except HostRequestError as err:
        if unknown_thread(err):
            return None
        raise


async def _interrupt(ctx: SessionContext, thread_id: str, turn_id: str) -> None:
    try:
        await ctx.reader.interrupt(thread_id, turn_id)
    except HostRequestError:
        pass  # the turn ended already, or the host closed the thread: it is read again
    except HostUnavailable:
        if not ctx.reader.connected:
            raise


def _attempt(step: Any) -> int:
    return int(step.get("attempt") or 1)
