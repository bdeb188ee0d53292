"""Binding a session call's waiting step: the owner's reports and the marker lookup.

While a step waits, its call's binder answers each dispatch report the inbox
hands it (the reply table, `crw.engine.steps.bind.decide_report`) and, at every poll,
looks the step's marker up on the host, so a subagent spawned, or a repair sent,
and never reported is bound all the same (DISP-25, DISP-26). A bind commits its
rows in one batch before its reply (BIND-6). A resumed call answers the reports
that wait in the inbox first, then looks the step up, and only then writes the
step again (ATT-18..21); a held call's step, which its hold retracted, is
published again: its row first (`session_progress.publish_again`).

The decisions are the engine's pure functions; the binder moves data between
them, the inbox, the host reader and the call's journal. It reads of its call
only `BinderCall` (its rows, state, pair, stop and step writer; it sets
`resumed` and the bound thread, and commits through the call) and of the run only
`BinderRun`.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Protocol

import trio

from crw.actors import evidence_records, step_binder_v2
from crw.actors.control import CallStop
from crw.actors.host_reader import HostReader
from crw.actors.inbox import Inbox
from crw.actors.step_writer import StepSource, StepWriter
from crw.binding import ledger
from crw.bus import steps as bus
from crw.bus.inbox import Report
from crw.engine.answers.harvest import CallEnd
from crw.engine.calls.session_progress import CallProgress, publish_again
from crw.engine.config.workflow import Workflow
from crw.engine.owner.multi_agent import V1, V2, MultiAgent
from crw.engine.run.rundir import RunDir
from crw.engine.steps import bind, ledger_join, lookup
from crw.engine.steps.replies import call_record, reads_host
from crw.host.errors import HostRequestError
from crw.host.protocol import Thread
from crw.host.transport import HostUnavailable
from crw.journal.rows import RowModel, SessionHostWarning, StepPublished
from crw.settings import Settings


class BinderCall(StepSource, Protocol):
    """What the binder reads of its call (`SessionCall`) beyond what its step
    writer does, sets (`resumed`, and the bound thread in `state`) and asks of it
    (`commit`)."""

    resumed: bool

    @property
    def state(self) -> CallProgress: ...
    @property
    def stop(self) -> CallStop: ...
    @property
    def steps(self) -> StepWriter: ...
    async def commit(self, rows: list[RowModel]) -> None: ...


class BinderRun(Protocol):
    """What the binder reads of its run (`SessionContext`)."""

    @property
    def inbox(self) -> Inbox: ...
    @property
    def reader(self) -> HostReader: ...
    @property
    def settings(self) -> Settings: ...
    @property
    def workflow(self) -> Workflow: ...
    @property
    def run(self) -> RunDir: ...
    @property
    def run_id(self) -> str: ...
    @property
    def owner(self) -> str: ...
    @property
    def strays(self) -> set[str]: ...
    @property
    def multi_agent(self) -> MultiAgent: ...


class StepBinder:
    """The bind of one call's waiting step; `await_bind` returns its subagent and turn."""

    def __init__(self, actor: BinderCall, ctx: BinderRun) -> None:
        self.actor = actor
        self.ctx = ctx
        self.retries: dict[tuple[int, int, str | None], int] = {}
        """How many times each report (k, attempt, subagent) was answered retry."""
        self.bound_read: Thread | None = None
        """The bound subagent's thread as the bind read it (`take_read`)."""

    def take_read(self, thread_id: str) -> Thread | None:
        """The read of `thread_id` the last bind made, once: what the call follows
        its turn from first (`crw.actors.attempt_watch.follow`)."""
        read, self.bound_read = self.bound_read, None
        return read if read is not None and read.id == thread_id else None

    async def await_bind(self, step: StepPublished) -> tuple[str, str] | CallEnd:
        """Wait for the owner's report, or find the subagent on the host; a report
        that the host refused the spawn ends the call held (spawn_failed)."""
        with self.ctx.inbox.subscribe(self.actor.call) as reports:
            if self.actor.resumed:  # the resume table's order for a last row step_published
                self.actor.resumed = False
                bound = await self._resume_step(step, reports)
                if bound is not None:
                    return bound
            while True:
                report: Report | None = None
                # Only the wait is under the poll's deadline: a bind, once begun, is
                # never cut between its rows and its reply.
                with self.actor.stop.waiting(), trio.move_on_after(self.ctx.settings.poll_interval):
                    report = await reports.receive()
                if report is not None:
                    bound = await self._decide(step, report)
                else:
                    bound = await self._look_up(step)
                    await self.actor.steps.retry()
                if bound is not None:
                    return bound

    async def _resume_step(
        self, step: StepPublished, reports: trio.MemoryReceiveChannel[Report]
    ) -> tuple[str, str] | CallEnd | None:
        """Answer first the reports that wait in the inbox (ATT-18), then look the
        step up on the host (ATT-19; a repair is never sent twice, ATT-20): a spawn
        by the spawn hook's ledger joined with the owner's turns (HOOK-17), then by
        its marker; else publish the same step again: write its files (ATT-21), its
        row first when a hold ended the row it had (ATT-35, STEP-21). Its packet,
        unsynced, is mended first: a report or a subagent found binds the step with
        the step file as it is, and none may be taken with a torn packet."""
        if self.actor.stop.reason is None:  # a stopped run writes none
            await self.actor.steps.mend(step)
        await self.ctx.inbox.poll()
        while True:
            try:
                report = reports.receive_nowait()
            except trio.WouldBlock:
                break
            bound = await self._decide(step, report)
            if bound is not None:
                return bound
        v1_spawn = step.action == "spawn" and self.ctx.multi_agent == V1
        bound = await self._join_ledger(step) if v1_spawn else None
        if bound is None:
            bound = await self._look_up(step)
        if bound is None and self.actor.stop.reason is None:  # a stopped run writes none
            again = publish_again(self.actor.rows)  # a hold ended the step's row: anew
            if again is not None:
                await self.actor.commit([again])
            await self.actor.steps.write(step)
        return bound

    async def _decide(
        self, step: StepPublished, report: Report
    ) -> tuple[str, str] | CallEnd | None:
        """Answer the owner's report on `step`, or on another step of the call
        (the reply table)."""
        if self.ctx.multi_agent == V2:
            decided, read = await step_binder_v2.decide(self._v2_read(step), report, self.retries)
            return await self._act(step, decided, report, read)
        waiting = (report.k, report.attempt) == (step.k, step.attempt)
        agent = report.agent_id or (step.agent_id if step.action == "send_input" else None)
        record = call_record(self.actor.rows)
        late = not waiting and reads_host(report.agent_id, record, report.failed)
        thread, host_error, unknown = await self._read_agent(
            agent if waiting else report.agent_id if late else None
        )
        key = (report.k, report.attempt, agent)
        decision = bind.decide_report(
            run_id=self.ctx.run_id,
            owner=self.ctx.owner,
            report=report,
            step=self._published(step),
            record=record,
            attempt=self._attempt_state(step),
            pair=self.actor.pair,
            thread=thread,
            host_error=host_error,
            unknown=unknown,
            retries=self.retries.get(key, 0),
        )
        if decision.kind == "retry":
            self.retries[key] = self.retries.get(key, 0) + 1
        return await self._act(step, decision, report, thread)

    async def _read_agent(self, agent: str | None) -> tuple[Thread | None, str | None, bool]:
        return await self.ctx.reader.read_subagent(agent)

    async def _act(
        self,
        step: StepPublished,
        decision: bind.Decision,
        report: Report | None,
        thread: Thread | None,
    ) -> tuple[str, str] | CallEnd | None:
        """Commit a bind's rows (one batch, BIND-6) before its reply; reply otherwise.
        `thread` is the subagent as the decision read it."""
        if isinstance(decision, bind.SpawnFailed):
            return await self._hold_failed(step, decision, report)
        if isinstance(decision, bind.Bound) and decision.thread_started is not None:
            placed = await evidence_records.place(
                step,
                decision.thread_started,
                rows=self.actor.rows,
                evidence_cwd=self.ctx.workflow.evidence_cwd,
                run_id=self.ctx.run_id,
                call=self.actor.call,
                commit=self.actor.commit,
            )
            if isinstance(placed, bind.SpawnFailed):  # the subagent stays unbound
                return await self._hold_failed(step, placed, report)
            decision = dataclasses.replace(decision, thread_started=placed)
        if isinstance(decision, bind.Bound):
            self.bound_read = thread
            rows: list[RowModel] = [
                r for r in (decision.thread_started, decision.turn_started) if r is not None
            ]
            closing = self.actor.steps.bound()  # a step bound before its files could be written
            await self.actor.commit(rows + ([closing] if closing is not None else []))
            retract = functools.partial(
                bus.retract_step, self.ctx.run, self.actor.call, step.k or 1, step.attempt or 1
            )
            if report is not None:  # the file retracted before the reply, in one thread hop
                body = {"reply": "bound", "reason": decision.reason, "warnings": decision.warnings}
                await self.ctx.inbox.reply(report, body, first=retract)
            else:  # in the loop's thread, as a reply's (`Inbox.reply`)
                await trio.lowlevel.checkpoint_if_cancelled()
                retract()
            started = decision.thread_started
            thread_id = started.thread_id if started is not None else step.agent_id
            if started is not None:
                self.actor.state.thread = started.model_dump()
                await self.close_strays(step, str(started.thread_id), self.bound_read)
            return str(thread_id), str(decision.turn_started.turn_id)
        if report is not None:
            reply: dict[str, Any] = {"reply": decision.kind, "reason": decision.reason}
            if decision.pair is not None:
                reply["pair"] = bind.reply_pair(decision.pair)
            await self.ctx.inbox.reply(report, reply)
        return None

    async def _hold_failed(
        self, step: StepPublished, failed: bind.SpawnFailed, report: Report | None
    ) -> CallEnd:
        """The host refused the step's spawn: the held row first (it carries the
        call's tokens, as every terminal row), then the step file is retracted (no
        spawn is asked for any more: its subagent slot is free) and the report is
        answered held."""
        held = failed.held.model_copy(update={"tokens": step.call_tokens})
        await self.actor.commit([held])
        await trio.to_thread.run_sync(
            bus.retract_step, self.ctx.run, self.actor.call, step.k or 1, step.attempt or 1
        )
        if report is not None:
            await self.ctx.inbox.reply(report, {"reply": failed.kind, "reason": failed.reason})
        return CallEnd(held)

    async def _join_ledger(self, step: StepPublished) -> tuple[str, str] | CallEnd | None:
        """The subagent of a spawn step published before the restart, by the ledger's
        op joined with the owner turns' spawn items (HOOK-17); what the join could
        not tie is a session_host_warning row (WAKE-15), once per op."""
        state = self.ctx.run.root.parent.parent  # <state>/flow/<run>
        lines = await trio.to_thread.run_sync(ledger.read_decisions, state, self.ctx.owner)
        try:
            owner = await self.ctx.reader.read(self.ctx.owner)
        except HostUnavailable:
            if not self.ctx.reader.connected:
                raise  # the host went away: the run pauses
            return None
        except HostRequestError:
            return None
        self.ctx.reader.forget(self.ctx.owner)  # its turns are not kept for the run's life
        published = self._published(step)
        op = published.op
        joined = ledger_join.join(self.ctx.run_id, published, lines, owner.turns)
        if joined.warnings and not self._warned(op):
            warning = SessionHostWarning(call=self.actor.call, op=op, warnings=joined.warnings)
            await self.actor.commit([warning])
        for agent in joined.subagents:
            thread, host_error, unknown = await self._read_agent(agent)
            decision = bind.decide_bind(
                self.ctx.owner,
                self._published(step),
                self._attempt_state(step),
                self.actor.pair,
                agent,
                thread,
                host_error,
                unknown=unknown,
            )
            if isinstance(decision, bind.Bound):
                return await self._act(step, decision, None, thread)
        return None

    def _warned(self, op: str | None) -> bool:
        """A session_host_warning row of the call names `op` already."""
        return any(
            row.get("row") == "session_host_warning" and row.get("op") == op
            for row in self.actor.rows
        )

    async def close_strays(self, step: StepPublished, bound_id: str, bound: Thread | None) -> None:
        """Every other open subagent of the owner carrying the bound attempt's step
        gets a close step; the first time, session_host_warning several_spawns.
        Asked at the bind and again when the bound turn ends (a spawn made after
        the bind), each time from the spawn index's look of the poll interval;
        `bound` is the bound subagent as last read, left out unread."""
        if self.ctx.multi_agent == V2:
            return  # codex keeps one child per task name: a step taken twice makes none
        marker = step.marker or ""
        try:
            carrying = await self.ctx.reader.spawned(self.ctx.owner, marker, bound)
        except (HostUnavailable, HostRequestError):
            return  # the bind stands; a stray's report is answered close
        strays = lookup.strays(self._published(step), self.ctx.owner, bound_id, carrying)
        if not strays:
            return
        if not self._warned(step.op):
            warning = SessionHostWarning(
                call=self.actor.call, op=step.op, warnings=["several_spawns"]
            )
            await self.actor.commit([warning])
        for agent in strays:
            await trio.to_thread.run_sync(
                bus.write_close, self.ctx.run, self.actor.call, step.attempt or 1, agent
            )
            self.ctx.strays.add(agent)

    def _v2_read(self, step: StepPublished) -> step_binder_v2.StepRead:
        return step_binder_v2.StepRead(
            reader=self.ctx.reader,
            run_id=self.ctx.run_id,
            owner=self.ctx.owner,
            step=self._published(step),
            attempt=self._attempt_state(step),
            pair=self.actor.pair,
            rows=self.actor.rows,
            read_agent=self._read_agent,
        )

    def _published(self, step: StepPublished) -> bind.PublishedStep:
        return bind.PublishedStep(
            call=self.actor.call,
            k=step.k or 1,
            attempt=step.attempt or 1,
            op=step.op or "",
            marker=step.marker or "",
            role=self.actor.node.role,
            action=step.action or "spawn",
            agent_id=step.agent_id,
            workspace=str(self.actor.workspace),
            run=self.ctx.run.id,
            packet=step.packet,
            conversation_turn=step.conversation_turn,
            replaces_turn=step.replaces_turn,
        )

    def _attempt_state(self, step: StepPublished) -> bind.AttemptState:
        bound = step.agent_id if step.action == "send_input" else self.actor.state.bound_thread_id
        return bind.AttemptState(thread_id=bound, prior_pairs=tuple(self.actor.state.pairs))

    async def _look_up(self, step: StepPublished) -> tuple[str, str] | CallEnd | None:
        """The marker on the host: a spawn, or a repair, never reported (DISP-25/26);
        on v2 the step's task name (`crw.actors.step_binder_v2`)."""
        if self.ctx.multi_agent == V2:
            found = await step_binder_v2.look_up(self._v2_read(step))
            return None if found is None else await self._act(step, found[0], None, found[1])
        try:
            if step.action == "send_input" and step.agent_id:
                thread: Thread | None = await self.ctx.reader.read(step.agent_id)
            else:
                carrying = await self.ctx.reader.spawned(self.ctx.owner, step.marker or "")
                thread = lookup.find_spawned(
                    self._published(step), self.ctx.owner, carrying, self.actor.pair
                )
        except HostUnavailable:
            if not self.ctx.reader.connected:
                raise  # the host went away: the run pauses
            return None
        except HostRequestError:
            return None
        if thread is None or bind.find_marker_turn(step.marker or "", thread) is None:
            return None
        decision = bind.decide_bind(
            self.ctx.owner,
            self._published(step),
            self._attempt_state(step),
            self.actor.pair,
            None,
            thread,
        )
        return await self._act(step, decision, None, thread)
