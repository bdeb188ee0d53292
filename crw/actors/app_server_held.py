"""A held App Server call goes on in place: its delivered turn taken again.

On its thread, resumed with the leaf keys (`AppServerCall.resume_thread`): the
thread's running turns are interrupted first, each interrupt_requested row
(reason held) durable before turn/interrupt, and each turn followed until it
ended (ATT-30, ATT-31); then the step `crw.engine.app_held.retake` decides is
committed, and its turn is started by the call's turns loop, once (ATT-32..34).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from crw.engine import app_held, app_resume, step_input
from crw.host.errors import HostRequestError
from crw.host.protocol import Thread
from crw.journal.rows import StepPublished

if TYPE_CHECKING:
    from crw.actors.app_server_call import AppServerCall


async def retake(
    actor: AppServerCall, rows: Sequence[Mapping[str, Any]], thread: Thread
) -> tuple[StepPublished, str] | None:
    """The step that takes the held call's delivered turn again, committed, and
    its text; None when the call's newest step was never bound (looked up by its
    marker, as a resume does)."""
    step = app_held.retake(rows, actor.packet, actor.model)
    if step is None:
        return None
    for turn_id in app_held.running_turns(thread):
        await actor.commit([app_held.held_interrupt(rows, actor.call, turn_id)])
        with contextlib.suppress(HostRequestError):  # it ended already: read it as it is
            await actor.ctx.reader.interrupt(thread.id, turn_id)
        await actor.ctx.reader.wait_turn(thread.id, turn_id)
    await actor.commit([step])
    return step, app_resume.turn_text(step_input.of(step), actor.tools)
