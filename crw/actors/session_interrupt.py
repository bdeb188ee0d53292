"""A session call's interrupt path: a pause, a cancellation, a deadline, or a
model the host cannot reach (`crw.engine.answers.unreachable`) reached it.

The decision is `crw.engine.holds.interrupt.plan` over the call's rows; this module
acts on it, each row durable before its effect:

    (look_up)   the known subagent's turn for the step bound first: turn_started
    interrupt_requested (reason, op, attempt, turn_id), in the same batch
    turn/interrupt, then thread/read until the thread is no longer active
    held (the reason), then the subagent's close step

A call with no bound subagent retracts its step, sends nothing and is held.

It reads of the call only `InterruptedCall` (its id and rows, and of the run its
directory, host reader and poll interval); it commits through the call, counts
the turn's tokens in the run's figure and asks the call to close its subagent.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

import trio

from crw.actors.host_reader import HostReader
from crw.bus import steps as bus
from crw.engine.answers import outcome
from crw.engine.answers.harvest import CallEnd
from crw.engine.calls.gate import RunSpent
from crw.engine.calls.session_progress import progress
from crw.engine.holds import interrupt
from crw.engine.run.rundir import RunDir
from crw.host.errors import HostRequestError
from crw.host.protocol import Thread
from crw.host.transport import HostUnavailable
from crw.journal.rows import RowModel, StepPublished, Tokens
from crw.settings import Settings


class InterruptedRun(Protocol):
    """What the interrupt path reads of the call's run (`SessionContext`)."""

    @property
    def run(self) -> RunDir: ...
    @property
    def reader(self) -> HostReader: ...
    @property
    def settings(self) -> Settings: ...


class InterruptedCall(Protocol):
    """What the interrupt path reads of the call (`SessionCall`) and asks of it."""

    @property
    def ctx(self) -> InterruptedRun: ...
    @property
    def call(self) -> str: ...
    @property
    def rows(self) -> list[dict[str, Any]]: ...
    @property
    def spent(self) -> RunSpent: ...
    async def commit(self, rows: list[RowModel]) -> None: ...
    async def close_subagent(
        self, attempt: int, agent_id: str, *, durable: bool = True
    ) -> None: ...


async def interrupt_call(
    call: InterruptedCall, reason: str, error: str | None = None, *, requested: bool = False
) -> CallEnd:
    """End `call` held for `reason` once the turn the interrupt reaches is over.

    `error`: what the held row says (a model the host cannot reach: what the host
    said), else the reason's own words; the interrupt_requested row carries it, so
    a resumed process that applies the intent holds the call with it too.
    `requested`: the rows hold the interrupt_requested row for the call's turn
    already (a resumed process applies an earlier process's intent, HARV-38).
    """
    plan = interrupt.plan(progress(call.rows))
    rows: list[RowModel] = []
    turn_id = plan.turn_id
    if plan.kind == "look_up" and plan.step is not None and plan.thread_id:
        thread = await _read(call, plan.thread_id)
        started = interrupt.turn_of_known(plan.step, thread) if thread is not None else None
        if started is not None:  # HARV-33: the rows name the turn the interrupt reaches
            rows.append(started)
            turn_id = started.turn_id
    step = plan.step
    if step is not None:
        await trio.to_thread.run_sync(
            bus.retract_step, call.ctx.run, call.call, step.k or 1, step.attempt or 1
        )
    tokens = _tokens(step.call_tokens if step is not None else None)
    if step is not None and plan.thread_id and turn_id:
        if not requested:
            rows.append(interrupt.requested(reason, step, turn_id, error))
        await call.commit(rows)  # HARV-35: durable before the interrupt is sent
        tokens = await _stop_turn(call, step, plan.thread_id, turn_id)
    held = interrupt.held(call.call, reason, tokens, error)
    await call.commit([held])
    if plan.thread_id:
        await call.close_subagent((step.attempt if step else None) or 1, plan.thread_id)
    return CallEnd(held)


async def _stop_turn(
    call: InterruptedCall, step: StepPublished, thread_id: str, turn_id: str
) -> Tokens:
    """Send the interrupt and read the thread until it is no longer active
    (HARV-31); the call's tokens, this turn's counted when its rollout reads."""
    try:
        await call.ctx.reader.interrupt(thread_id, turn_id)
    except HostRequestError:
        pass  # the turn ended already, or the host closed the thread: read it
    except HostUnavailable:
        if not call.ctx.reader.connected:
            raise  # the host went away: the run pauses, the row decides the turn
    thread = await _settle(call, thread_id, turn_id)
    seen = _tokens(step.tokens_seen)
    call_tokens = _tokens(step.call_tokens)
    if thread is None:
        return call_tokens
    total = await trio.to_thread.run_sync(outcome.read_rollout_total, _path(thread.path))
    spent = call_tokens + (outcome.turn_tokens(total, seen) if total is not None else Tokens())
    call.spent.count(call.call, spent)
    return spent


async def _settle(call: InterruptedCall, thread_id: str, turn_id: str) -> Thread | None:
    """The thread once the turn is over; None when the host does not know it."""
    while True:
        try:
            thread = await call.ctx.reader.read(thread_id)
        except HostRequestError:
            return None
        except HostUnavailable:
            if not call.ctx.reader.connected:
                raise  # the host went away: the run pauses, the row decides the turn
            thread = None  # no answer in time: read again
        if thread is not None and interrupt.settled(thread, turn_id):
            return thread
        await trio.sleep(call.ctx.settings.poll_interval)


async def _read(call: InterruptedCall, thread_id: str) -> Thread | None:
    """The subagent as the host shows it; None when the host does not know it."""
    try:
        return await call.ctx.reader.read(thread_id)
    except HostRequestError:
        return None
    except HostUnavailable:
        if not call.ctx.reader.connected:
            raise
        return None


def _tokens(value: Tokens | None) -> Tokens:
    return value if value is not None else Tokens()


def _path(path: str | None) -> Path:
    return Path(path) if path else Path("/nonexistent-rollout")
