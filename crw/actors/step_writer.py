"""Writing a session call's published step: its packet and step file.

The step_published row is committed first (intent before effect); then the files
go through the FileStepBus. A write that fails (a full disk) was sent to nobody:
it is the flow warning step_unwritten at the 1st, 10th, 100th, … failure
(`crw.bus.unwritten`), the step is written again at each poll until it can be or
its turn is bound, and a closing step_unwritten says which (written true/false).
The files are rebuilt from the row alone, so a resumed process writes the same
files the dead one meant to: they are not synced (`crw.bus.steps`), and a resumed
call mends the packet of its unbound step before anything else (`mend`).
A call whose packet a later packet names (`durable_packet`) syncs it.

It reads of its call only `StepSource` (the call's id, role, pair, workspace and
packet builder) and of the run only `WriterRun` (its directory and id, the clock
and the journal, where it commits the step_unwritten rows); it writes the step's
files and the flow evidence record's copies.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import trio

from crw.actors import evidence_records
from crw.actors.journal_writer import JournalWriter
from crw.bus import steps as bus
from crw.bus.unwritten import UnwrittenTracker
from crw.clock import WallClock
from crw.engine.config.roles import RolePair
from crw.engine.config.workflow_nodes import Node
from crw.engine.run.rundir import RunDir
from crw.engine.steps import step_input
from crw.journal.rows import StepPublished, StepUnwritten


class StepSource(Protocol):
    """What the writer reads of its call (`SessionCall`)."""

    @property
    def call(self) -> str: ...
    @property
    def node(self) -> Node: ...
    @property
    def pair(self) -> RolePair: ...
    @property
    def workspace(self) -> Path: ...
    @property
    def rows(self) -> list[dict[str, Any]]: ...
    @property
    def durable_packet(self) -> bool: ...
    def packet_text(self, **extra: Any) -> str: ...


class WriterRun(Protocol):
    """What the writer reads of its run (`SessionContext`)."""

    @property
    def run(self) -> RunDir: ...
    @property
    def run_id(self) -> str: ...
    @property
    def clock(self) -> WallClock: ...
    @property
    def journal(self) -> JournalWriter: ...


class StepWriter:
    """The files of one call's newest step, and the record of failing to write them."""

    def __init__(self, call: StepSource, ctx: WriterRun) -> None:
        self.call = call
        self.ctx = ctx
        self.pending: StepPublished | None = None
        self.unwritten: UnwrittenTracker | None = None
        self.built: tuple[str, str] | None = None
        """The packet path and text the call built for its newest step's digest:
        its file is that text, so it is not built again."""

    async def write(self, step: StepPublished, before: Callable[[], None] | None = None) -> None:
        """Write `step`'s files now (a failure is recorded and retried later), and
        rewrite the flow evidence record's copies its row names. `before` (the
        call's P) runs first, in the same worker thread as the packet's write; its
        error is raised, not recorded as an unwritten step."""
        if before is not None and step.evidence_assignment:
            await trio.to_thread.run_sync(before)  # the evidence copies may lie in P
            before = None
        await evidence_records.refresh(self.ctx.run_id, step)
        self.unwritten = UnwrittenTracker(
            call=self.call.call,
            k=step.k or 1,
            attempt=step.attempt or 1,
            action=step.action or "spawn",
        )
        self.pending = step
        await self.retry(before)

    async def retry(self, before: Callable[[], None] | None = None) -> None:
        """Write the pending step's files again, if they are still unwritten;
        `before` as `write` says."""
        step, tracker = self.pending, self.unwritten
        if step is None or tracker is None:
            return
        step_file, text = self.files(step)
        run, durable = self.ctx.run, self.call.durable_packet

        def work() -> OSError | None:
            if before is not None:
                before()
            try:
                bus.write_packet(run, step_file, text, durable=durable)
            except OSError as err:
                return err
            return None

        if durable or before is not None:  # a sync, or P's making: off the loop's thread
            failed = await trio.to_thread.run_sync(work)
        else:  # a few syscalls, no sync: a worker-thread hop would cost more
            await trio.lowlevel.checkpoint_if_cancelled()
            failed = work()
        if failed is None:
            # Unsynced, so written in the loop's thread, as a bind's reply and the
            # close step are. No checkpoint since the packet's write, so a call
            # cancelled meanwhile still gets its step file, as in one hop.
            try:
                bus.write_step_file(run, step_file)
            except OSError as err:
                failed = err
        if failed is not None:
            row = tracker.failed(self.ctx.clock(), f"{failed.strerror or failed}")
        else:
            self.pending = None
            row = tracker.written()
        if row is not None:
            await self.ctx.journal.commit([row])

    async def mend(self, step: StepPublished) -> None:
        """Before a resumed call goes on with `step`, published by an earlier
        process and bound to no subagent: its packet written again from the row
        when it is not whole (ATT-21; a power loss may take an unsynced packet or
        leave it torn while its step file survives, and a step file is taken as
        it is). A packet that cannot be written takes the step file with it, so no
        subagent is spawned on a torn packet; the step is written again later."""
        if step.action != "spawn" or not step.packet or not step.packet_digest:
            return
        step_file, text = self.files(step)
        run, digest, durable = self.ctx.run, step.packet_digest, self.call.durable_packet

        def work() -> None:
            if bus.packet_whole(run, step_file.call, step_file.k, step_file.attempt, digest):
                return
            try:
                bus.write_packet(run, step_file, text, durable=durable)
            except OSError:
                bus.retract_step(run, step_file.call, step_file.k, step_file.attempt)

        await trio.to_thread.run_sync(work)

    def bound(self) -> StepUnwritten | None:
        """The step's turn was bound: nothing more to write; the closing row
        (written: false) when its files never could be."""
        closing = self.unwritten.turn_ended() if self.pending and self.unwritten else None
        self.pending = None
        return closing

    def files(self, step: StepPublished) -> tuple[bus.StepFile, str | None]:
        """The step file and packet of a published step, rebuilt from its row alone
        (a resumed process writes the same files the dead one meant to); a
        send_input step has no packet."""
        text = None
        if step.action == "spawn" and self.built is not None and self.built[0] == step.packet:
            text = self.built[1]
        elif step.action == "spawn":
            text = self.call.packet_text(
                note=step.note,
                previous_answer=step_input.answer_of(step, self.call.rows),
                repair_errors=step.repair_errors,
            )
        return (
            bus.StepFile(
                call=self.call.call,
                k=step.k or 1,
                attempt=step.attempt or 1,
                op=step.op or "",
                marker=step.marker or "",
                role=self.call.node.role,
                action=step.action or "spawn",
                agent_type=step.agent_type or self.call.pair.agent_type,
                model=step.model,
                reasoning_effort=step.effort,
                message=step_input.of(step, self.call.rows),
                packet=step.packet or "",
                workspace=str(self.call.workspace),
                agent_id=step.agent_id,
            ),
            text,
        )
