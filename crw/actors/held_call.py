"""A held call answered retry goes on in place (ATT-30..35).

First the subagents of its held attempts are shown not running: each is read, and
a running turn is interrupted (its interrupt_requested row durable first) and the
thread read again until it is not active. Then the call goes on as
`crw.engine.holds.decision.in_place` decides: the step published and never bound is
looked up by its marker first (and published again only when nothing is found),
else a new attempt takes the delivered turn again on a new subagent; so does a
repair the hold kept from its subagent (closed with the hold), which goes to a
new one (STEP-26).

It reads of the call only `HeldCall` (its rows and state, and of the run the
host reader and the poll interval); it commits the interrupt_requested rows,
sets `resumed` and the state's step, and publishes the step through the call.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

import trio

from crw.actors.host_reader import HostReader
from crw.engine.answers.harvest import CallEnd
from crw.engine.calls.session_progress import CallProgress
from crw.engine.config.workflow_nodes import Node
from crw.engine.holds import decision
from crw.engine.holds.decision import InPlace
from crw.host.errors import HostRequestError, unknown_thread
from crw.host.protocol import Thread
from crw.host.transport import HostUnavailable
from crw.journal.rows import InterruptRequested, RowModel, StepPublished
from crw.settings import Settings


class HeldRun(Protocol):
    """What a retried call's going on reads of its run (`SessionContext`)."""

    @property
    def reader(self) -> HostReader: ...
    @property
    def settings(self) -> Settings: ...


class HeldCall(Protocol):
    """What a retried call's going on reads of the call (`SessionCall`), sets
    (`resumed`, the steps and pairs in `state`) and asks of it."""

    resumed: bool

    @property
    def ctx(self) -> HeldRun: ...
    @property
    def call(self) -> str: ...
    @property
    def node(self) -> Node: ...
    @property
    def workspace(self) -> Path: ...
    @property
    def rows(self) -> list[dict[str, Any]]: ...
    @property
    def state(self) -> CallProgress: ...
    async def commit(self, rows: list[RowModel]) -> None: ...
    def in_place_step(self, plan: InPlace) -> StepPublished: ...
    async def current_step(self) -> StepPublished | CallEnd: ...
    async def publish(self, step: StepPublished) -> StepPublished: ...


async def go_on_in_place(call: HeldCall) -> StepPublished | CallEnd:
    """The step the retried call goes on with, published when it is a new one."""
    threads = {
        thread_id: await shown_not_running(call, thread_id) for thread_id in _held_subagents(call)
    }
    state = call.state
    if state.step is None:  # held before its first step: it publishes it now
        return await call.current_step()
    held_back = decision.undelivered(state.step, threads.get(str(state.step.get("agent_id"))))
    plan = decision.in_place(call.rows, call.node.role, str(call.workspace), undelivered=held_back)
    if plan.look_up:
        call.resumed = True  # the binder answers reports, looks it up, then writes it again
        return StepPublished.model_validate(dict(state.step))
    step = call.in_place_step(plan)
    if state.thread is not None:  # the new subagent is bound with it as a prior pair
        thread = state.thread
        state.pairs.append({"model": thread.get("model"), "effort": thread.get("effort")})
    state.step, state.thread, state.turn = step.model_dump(), None, None
    return await call.publish(step)


def _held_subagents(call: HeldCall) -> list[str]:
    """Every subagent the call's rows bound, each once, in the order they were bound."""
    ids = [
        str(row["thread_id"])
        for row in call.rows
        if row.get("row") == "thread_started" and row.get("thread_id")
    ]
    return list(dict.fromkeys(ids))


async def shown_not_running(call: HeldCall, thread_id: str) -> Thread | None:
    """Read `thread_id` until it is not active; a running turn is interrupted once,
    its interrupt_requested row durable before the interrupt is sent (ATT-31). A
    thread the host does not know runs nothing. Returns the thread as last read,
    or None for one the host does not know."""
    interrupted: set[str] = set()
    while True:
        try:
            thread = await call.ctx.reader.read(thread_id)
        except HostRequestError as err:
            if unknown_thread(err):
                return None
            raise
        if thread.status.type != "active":
            return thread
        for turn_id in _running_turns(thread):
            if turn_id not in interrupted:
                interrupted.add(turn_id)
                await call.commit([_interrupt_row(call, turn_id)])
                await _interrupt(call, thread_id, turn_id)
        await trio.sleep(call.ctx.settings.poll_interval)


async def _interrupt(call: HeldCall, thread_id: str, turn_id: str) -> None:
    """Send the interrupt; a refusal (the turn ended between the read and the
    interrupt, or the host closed the thread) is left to the next read."""
    try:
        await call.ctx.reader.interrupt(thread_id, turn_id)
    except HostRequestError:
        pass  # the turn ended already, or the host closed the thread: it is read again
    except HostUnavailable:
        if not call.ctx.reader.connected:
            raise  # the host went away: the run pauses, the row decides the turn


def _running_turns(thread: Thread) -> list[str]:
    return [turn.id for turn in thread.turns if turn.status == "inProgress"]


def _interrupt_row(call: HeldCall, turn_id: str) -> InterruptRequested:
    """The intent to interrupt `turn_id`, naming the step and attempt it was bound to."""
    bound = [r for r in call.rows if r.get("row") == "turn_started" and r.get("turn_id") == turn_id]
    step = bound[-1] if bound else (call.state.step or {})
    return InterruptRequested(
        call=call.call,
        reason=decision.HELD_INTERRUPT,
        op=step.get("op"),
        attempt=step.get("attempt"),
        turn_id=turn_id,
    )
