"""The run's sweep for duplicates of ended calls' steps (`crw.engine.steps.late_strays`).

While the run's calls run, once a call has ended, every poll interval the sweep
takes the subagents the marker index learned since (the lookups' looks,
`crw.actors.spawn_index`), and makes a look itself every LOOK_EVERY polls, so a
run whose calls wait on no spawn finds a duplicate within LOOK_EVERY polls. A
subagent whose step is not settled yet is kept and asked about again; one whose
step is settled is read once, and closed when it is an open duplicate: the session_host_warning
several_spawns row first (unless the journal holds it: once per op, across
processes), then its close step. A resumed process's first look indexes every
open subagent of the owner, so a duplicate an earlier process left is found too.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import trio

from crw.bus import steps as bus
from crw.engine.steps import late_strays
from crw.host.errors import HostRequestError, unknown_thread
from crw.host.transport import HostUnavailable

if TYPE_CHECKING:
    from crw.actors.session_context import SessionContext

log = logging.getLogger("crw.session")

LOOK_EVERY = 5
"""The sweep takes what the lookups' looks indexed at every poll, and looks
itself (a thread/list page when nothing was spawned) once every LOOK_EVERY polls."""


async def sweep(ctx: SessionContext) -> None:
    """Close the late duplicates of ended calls' steps until cancelled."""
    waiting: dict[str, late_strays.Step] = {}
    """The subagents whose step is not settled yet, by id."""
    seen = polls = 0
    index = ctx.reader.owner_spawns(ctx.owner)
    while True:
        await trio.sleep(ctx.settings.poll_interval)
        if not ctx.records.any_ended():
            continue
        polls += 1
        try:
            new, seen = await index.since(seen, look=polls % LOOK_EVERY == 1)
        except (HostUnavailable, HostRequestError):
            continue  # the host watch pauses a run whose host went away
        for agent, marker in new:
            step = late_strays.step_of(marker)
            if step is not None:
                waiting[agent] = step
        for agent, step in list(waiting.items()):
            judged = late_strays.verdict(step, agent, ctx.records.record(step.call))
            unread = judged == "read" and agent not in ctx.strays
            if unread and await _close(ctx, step, agent) is None:
                continue  # the host cannot answer now: asked about again
            if judged != "wait":
                del waiting[agent]


async def _close(ctx: SessionContext, step: late_strays.Step, agent: str) -> bool | None:
    """Read `agent` and close it when it is a duplicate of `step` (True; False: it
    is not one; None: the host cannot answer now). The row, then the close step,
    neither cut by the sweep's end: a process that dies between them leaves the
    subagent to the next process's sweep, which writes no second row."""
    try:
        thread = await ctx.reader.read(agent)
    except HostUnavailable:
        return None
    except HostRequestError as err:
        return False if unknown_thread(err) else None
    if not late_strays.is_duplicate(ctx.run.id, ctx.owner, step, thread):
        ctx.reader.forget(agent)  # no call of the run follows it
        return False
    with trio.CancelScope(shield=True):
        row = late_strays.warning(step, ctx.records.record(step.call))
        if row is not None:
            await ctx.journal.commit([row], stamped=False)
            ctx.records.add([row.model_dump()])
        try:
            await trio.to_thread.run_sync(bus.write_close, ctx.run, step.call, step.attempt, agent)
        except ValueError:
            return False  # no id a close step can name
        except OSError as err:  # a full disk: written again at the next look
            log.warning("cannot write the close step of duplicate %s: %s", agent, err)
            return None
        ctx.strays.add(agent)
    ctx.reader.forget(agent)
    return True
