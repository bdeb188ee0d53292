"""An App Server call's life: from its first step, or from where an earlier process left it.

A new call commits its opening rows and first step, makes P and starts its thread
(`crw.actors.app_server_call.AppServerCall`). A call an earlier process left open
goes on in place, as `crw.engine.holds.app_resume` decides from its rows and the
host's read of its resumed thread; so does a held call answered retry, or held by
a pause when the run resumes: its delivered turn is taken again by a new turn on
its thread (`crw.actors.app_server_held`). It decides nothing itself (the engine
does) and never talks to the host but through the call.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from crw.actors import app_server_held
from crw.actors.app_server_call import AppServerCall
from crw.actors.app_server_context import CallContext
from crw.engine.answers.harvest import CallEnd
from crw.engine.config.workflow_nodes import Node
from crw.engine.holds import app_resume
from crw.engine.steps import step_input
from crw.host.errors import HostRequestError, unknown_thread
from crw.journal.rows import Held, StepPublished


async def run_app_server_call(
    ctx: CallContext,
    node: Node,
    call: str,
    results: Mapping[str, Any],
    rows: Sequence[Mapping[str, Any]] = (),
) -> CallEnd:
    """Run one call to its end; `results` are the results of the node's needs, and
    `rows` the call's rows an earlier process wrote (a call it left open goes on)."""
    return await run_actor(AppServerCall(ctx, node, call, results), rows)


async def run_actor(actor: AppServerCall, rows: Sequence[Mapping[str, Any]] = ()) -> CallEnd:
    """Run `actor`'s call to its end, going on from `rows` when an earlier process
    left it open. A host that cannot be reached (its connection lost, a request or
    the reader's probe unanswered within `Settings.host_timeout`) raises
    HostUnavailable out of it with the call's rows as they are: the run pauses
    host_unavailable, and a resumed process goes on with the call in place."""
    with actor.ctx.control.enter(actor.node.timeout) as actor.stop:
        open_call = app_resume.generation(rows)
        await actor.allocate(rows)
        if open_call is None:
            step, text = actor.first_step()
            await actor.commit([*actor.opening(), step])
            await actor.make_workspace()
            return await actor.turns(await actor.start_thread(), step, None, text)
        return await _go_on(actor, open_call, rows)


async def _go_on(
    actor: AppServerCall, open_call: app_resume.Generation, rows: Sequence[Mapping[str, Any]]
) -> CallEnd:
    """Go on with a call an earlier process left open, or a hold answered retry
    or paused, as `app_resume` decides from its rows and the host's read of its
    resumed thread; a held call's delivered turn is taken again (`app_server_held`)."""
    thread = None
    if open_call.thread_id is not None:
        try:
            thread = await actor.resume_thread(open_call.thread_id)
        except HostRequestError as err:
            # codex writes a thread's rollout with its first turn and cannot resume
            # a thread that has none: it never took a turn, so another is started.
            if not unknown_thread(err) or open_call.turn_id is not None:
                row = Held(call=actor.call, reason="host_failure", error=str(err))
                await actor.commit([row])
                return CallEnd(row)
    if open_call.held is not None and thread is not None:
        retaken = await app_server_held.retake(actor, actor.ctx.reader, rows, thread)
        if retaken is not None:
            step, text = retaken
            return await actor.turns(thread.id, step, None, text)
    decision = app_resume.decide(open_call, thread)
    if decision.action == "publish":
        step, _ = actor.first_step()
        await actor.commit([step])
        open_call = replace(open_call, step=step.model_dump(exclude_none=True))
        decision = app_resume.decide(open_call, thread)
    assert open_call.step is not None
    step = StepPublished.model_validate(dict(open_call.step))
    text = app_resume.turn_text(step_input.of(step, rows), actor.tools)
    if decision.action == "start_thread":
        await actor.make_workspace()
        return await actor.turns(await actor.start_thread(), step, None, text)
    assert thread is not None
    if decision.action == "adopt":
        assert decision.turn_id is not None
        await actor.commit([actor.turn_started(step, decision.turn_id)])
    return await actor.turns(thread.id, step, decision.turn_id, text)
