"""The WakeScheduler actor: waking the owner thread while steps wait.

One task under the run nursery of a session run owns every timer of waking the
owner. The calls tell it what they commit (`saw`, a watched value, never a
file poll); the decisions are `crw.engine.owner.wake`'s. Its life, for each wake:

    outbox/<id>.json   the staged session_step_waiting message (StageWake):
                       made once per logical id; one held already stages nothing
    session_wake       the wake's row, staged or not (and why), durable before
                       the message reaches the owner
    (delivery)         a new turn on an idle owner; thread/resume then a turn on
                       a notLoaded one; after the running turn on a busy one
    message_delivery   the delivery, once the turn started (or why it failed)

and `escalation` (session_unresponsive) once, when steps waited UnresponsiveAfter
without a bind. A resumed process first settles the wakes an earlier one staged
and did not record delivered: one the owner's turns carry gets its
message_delivery (via found); none is delivered again. Deliveries run in a task
of their own, so a busy owner delays its wakes, never the schedule. A run that
is stopping stages and delivers nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import trio
from trio_util import AsyncValue

from crw.actors.control import RunControl
from crw.actors.host_reader import HostReader
from crw.actors.journal_writer import JournalWriter
from crw.bus import outbox
from crw.engine.owner import wake as plan
from crw.engine.run.rundir import RunDir
from crw.host.errors import HostRequestError
from crw.host.transport import HostUnavailable
from crw.journal.rows import Escalation, MessageDelivery, SessionWake
from crw.settings import Settings

DELIVERIES = 16
"""Staged wakes waiting for delivery: renotifications come minutes apart, so a
busy owner holds back a few at most; the schedule waits when it holds more."""


@dataclass(frozen=True)
class _Staged:
    wake_id: str
    text: str


class WakeScheduler:
    """Wakes `owner` about the run's waiting steps; `run` is its task."""

    def __init__(
        self,
        *,
        journal: JournalWriter,
        reader: HostReader,
        run: RunDir,
        run_id: str,
        owner: str,
        settings: Settings,
        control: RunControl,
        rows: Iterable[Mapping[str, Any]],
    ) -> None:
        rows = list(rows)
        self._journal, self._reader, self._run = journal, reader, run
        self._run_id, self._owner, self._control = run_id, owner, control
        self._poll = settings.host_poll_interval
        self._plan = plan.WakePlan(run_id, plan.process_number(rows), plan.Timers.of(settings))
        self.waiting = AsyncValue(plan.fold(plan.Waiting(), rows))
        """The run's waiting steps; a resumed process starts from its journal's."""
        self._unsettled = plan.unsettled(rows)
        self._known: tuple[str, trio.Event, float] | None = None
        """The owner's status last read, the event its change sets, and until when
        it stands."""

    def saw(self, rows: list[dict[str, Any]]) -> None:
        """The rows a call just committed (called by the call, synchronously)."""
        self.waiting.value = plan.fold(self.waiting.value, rows)

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        send, receive = trio.open_memory_channel[_Staged](DELIVERIES)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._deliveries, receive)
            task_status.started()
            await self._settle()
            async with send:
                await self._schedule(send)

    async def _schedule(self, send: trio.MemorySendChannel[_Staged]) -> None:
        while True:
            if self._plan.observe(self.waiting.value, trio.current_time()):
                status = await self._owner_status()
                wake = self._plan.publication(status, trio.current_time())
                if wake is not None:
                    await self._stage(wake, status, send)
            for due in self._plan.due(trio.current_time()):
                if isinstance(due, plan.Wake):
                    await self._stage(due, await self._owner_status(), send)
                elif self._control.reason is None:
                    await self._journal.commit([self._escalation(due)])
            with trio.move_on_at(self._plan.deadline()):
                await self.waiting.wait_value(self._unseen)

    def _unseen(self, waiting: plan.Waiting) -> bool:
        return waiting is not self._plan.seen

    async def _settle(self) -> None:
        """Record the delivery of an earlier process's wakes the owner's turns
        carry (it died before their message_delivery rows); one the owner never
        got stays undelivered: this process wakes under its own ids."""
        if not self._unsettled:
            return
        try:
            owner = await self._reader.read(self._owner)
        except (HostUnavailable, HostRequestError):
            return
        self._reader.forget(self._owner)  # its turns are not kept for the run's life
        found = plan.delivered(self._unsettled, owner)
        rows = [
            MessageDelivery(wake_id=wid, status="delivered", via="found", turn_id=turn_id)
            for wid, turn_id in found.items()
        ]
        if rows:
            await self._journal.commit(rows)

    async def _owner_status(self) -> str:
        """The owner's status as the host shows it (`unknown` when it cannot say).
        A read stands until the host announces a change of the owner, or for a
        poll interval at most: a run publishing many steps reads it once."""
        known = self._known
        if known is not None and not known[1].is_set() and trio.current_time() < known[2]:
            return known[0]
        changed = self._reader.changed(self._owner)
        try:
            status = (await self._reader.status(self._owner)).status.type
        except (HostUnavailable, HostRequestError):
            self._known = None
            return "unknown"
        self._known = (status, changed, trio.current_time() + self._poll)
        return status

    async def _stage(
        self, wake: plan.Wake, status: str, send: trio.MemorySendChannel[_Staged]
    ) -> None:
        """Stage the wake in the outbox, write its row, then hand it to delivery."""
        if self._control.reason is not None:
            return
        text = plan.wake_text(wake.wake_id, self._run_id, wake.ops)
        row = SessionWake(
            batch=wake.batch,
            wake_id=wake.wake_id,
            renotify=wake.renotify,
            ops=wake.ops,
            owner=self._owner,
            owner_status=status,
            waiting_seconds=wake.waiting_seconds,
        )
        body = {"message": plan.MESSAGE, "owner": self._owner, "ops": wake.ops, "text": text}
        try:
            staged = await trio.to_thread.run_sync(outbox.stage, self._run, wake.wake_id, body)
        except OSError as err:
            row.staged, row.error = False, f"{err.filename}: {err.strerror or err}"
        else:
            row.staged = staged
            row.reason = None if staged else plan.ALREADY_HELD
        await self._journal.commit([row])
        if row.staged:
            await send.send(_Staged(wake.wake_id, text))

    def _escalation(self, due: plan.Escalate) -> Escalation:
        return Escalation(
            reason="session_unresponsive",
            owner=self._owner,
            ops=due.ops,
            batch=due.batch,
            waiting_seconds=due.waiting_seconds,
        )

    async def _deliveries(self, receive: trio.MemoryReceiveChannel[_Staged]) -> None:
        async with receive:
            async for staged in receive:
                row = await self._deliver(staged)
                if row is not None:
                    await self._journal.commit([row])

    async def _deliver(self, staged: _Staged) -> MessageDelivery | None:
        """Start the wake's turn on the owner: at once when it is idle, after a
        thread/resume when notLoaded, after its running turn when busy. None when
        nothing is to be recorded (the run is stopping, or its host is gone)."""
        waited = False
        while self._control.reason is None:
            changed = self._reader.changed(self._owner)
            status = await self._owner_status()
            if status == "active":  # its turn first (WAKE-4)
                waited = True
                with trio.move_on_after(self._poll):
                    await changed.wait()
                continue
            try:
                if status == "notLoaded":  # WAKE-3
                    await self._reader.resume_thread(self._owner)
                turn = await self._reader.start_turn(self._owner, staged.text)
            except (HostRequestError, HostUnavailable) as err:
                if not self._reader.connected:
                    return None  # the run pauses; its next process wakes under its own ids
                if await self._owner_status() == "active":
                    continue  # a turn began meanwhile: after it
                return MessageDelivery(wake_id=staged.wake_id, status="failed", error=str(err))
            self._known = None  # the owner is busy with it now
            via = "resume_turn" if status == "notLoaded" else "after_turn" if waited else "turn"
            return MessageDelivery(
                wake_id=staged.wake_id, status="delivered", via=via, turn_id=turn.id
            )
        return None
