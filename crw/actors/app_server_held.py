"""A held App Server call goes on in place: its delivered turn taken again.

On its thread, resumed with the leaf keys (`AppServerCall.resume_thread`): the
thread's running turns are interrupted first, each interrupt_requested row
(reason held) durable before turn/interrupt, and each turn followed until it
ended (ATT-30, ATT-31); then the step `crw.engine.holds.app_held.retake` decides is
committed, and its turn is started by the call's turns loop, once (ATT-32..34).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from crw.engine.holds import app_held, app_resume
from crw.engine.steps import step_input
from crw.engine.steps.packet import Packet
from crw.host.errors import HostRequestError
from crw.host.protocol import Thread
from crw.journal.rows import RowModel, StepPublished


class HeldCall(Protocol):
    """What a retake reads of the held call (an `AppServerCall`), and its commit."""

    @property
    def call(self) -> str: ...
    @property
    def packet(self) -> Packet: ...
    @property
    def model(self) -> str | None: ...
    @property
    def tools(self) -> str | None:
        """The Repository tools section its turn texts end with."""

    async def commit(self, rows: list[RowModel]) -> None:
        """The rows durable in the run's journal."""


class TurnReader(Protocol):
    """What a retake asks of the run's host reader: a turn interrupted, and followed
    until it ended."""

    async def interrupt(self, thread_id: str, turn_id: str) -> None: ...
    async def wait_turn(self, thread_id: str, turn_id: str) -> object: ...


async def retake(
    actor: HeldCall, reader: TurnReader, rows: Sequence[Mapping[str, Any]], thread: Thread
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
            await reader.interrupt(thread.id, turn_id)
        await reader.wait_turn(thread.id, turn_id)
    await actor.commit([step])
    return step, app_resume.turn_text(step_input.of(step, rows), actor.tools)
