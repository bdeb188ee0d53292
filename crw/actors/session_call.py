"""The session call actor: the run starts no thread and no turn of its own.

One Trio task per admitted call, entered with the call's rows, going on from its
last row (`crw.engine.calls.session_progress`). Its life, each row committed before
its effect:

    prepared +        the allocation every attempt shares (P: `crw.workspace.placer`)
    step_published    and the first step's intent, one batch; then P is made, and
                      the step's packet and step file are written (a write that
                      fails: step_unwritten, retried at each poll)
    thread_started +  the bind, one batch: a dispatch report the owner wrote,
    turn_started      or the subagent found on the host by its marker
                      (`crw.actors.step_binder`)
    (harvest)         the marker turn read until it ends; the answer judged
    step_published    the repair: send_input to the open subagent (then
                      turn_started only), or a spawn when it was closed
    completed | null_model | held, then the subagent's close step

The decisions are the engine's pure functions (bind, harvest, outcome); this
module moves data between them, the journal, the bus, the inbox and the reader.
Its parts (`step_writer`, `step_binder`, `held_call`, `session_interrupt`,
`call_trace`) each declare the narrow face of the call they read; none imports it.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import trio

from crw.actors import evidence_records, executor_git, off_loop
from crw.actors.attempt_watch import follow
from crw.actors.call_steps import CallSteps
from crw.actors.call_trace import trace_warnings, traced_bind
from crw.actors.control import CallStop, Interrupted
from crw.actors.held_call import go_on_in_place
from crw.actors.host_reader import ModelUnreachable
from crw.actors.rollout_tokens import rollout_total
from crw.actors.session_context import SessionContext
from crw.actors.session_interrupt import interrupt_call
from crw.actors.step_binder import StepBinder
from crw.actors.step_writer import StepWriter
from crw.bus import steps as bus
from crw.engine.answers import answer, harvest, outcome
from crw.engine.answers.harvest import CallEnd
from crw.engine.calls import lost
from crw.engine.calls.gate import RunSpent
from crw.engine.calls.session_progress import CallProgress, progress
from crw.engine.config.roles import RolePair, default_agent_type
from crw.engine.config.template import render_task
from crw.engine.config.workflow_nodes import Node
from crw.engine.holds import interrupt
from crw.engine.run.rundir import PRIVATE_DIR
from crw.engine.steps import step_input
from crw.host.protocol import Thread
from crw.journal.rows import (
    NO_TOKENS,
    Allocation,
    Held,
    Prepared,
    RowModel,
    StepPublished,
    Tokens,
)
from crw.workspace.placer import allocation_of


class SessionCall(CallSteps):
    """One call's task; `run()` takes it to its terminal row."""

    def __init__(
        self,
        ctx: SessionContext,
        node: Node,
        call: str,
        results: Mapping[str, Any],
        rows: list[dict[str, Any]],
        spent: RunSpent,
    ) -> None:
        self.ctx, self.node, self.call = ctx, node, call
        self.spent = spent
        """The run's running token figure, which this call's tokens count against."""
        self.task = render_task(node.task, results)
        self.allocation = allocation_of(rows)
        """The call's allocation: its prepared row's, once decided (STEP-1)."""
        self.workspace = ctx.run.calls / call
        if self.allocation is not None and self.allocation.workspace:
            self.workspace = Path(self.allocation.workspace)
        self.pair = ctx.pairs.get(node.role) or RolePair(agent_type=default_agent_type(node.role))
        self.state: CallProgress = progress(rows)
        self.rows = list(rows)
        """The call's rows, those this process commits included."""
        self.steps = StepWriter(self, ctx)
        self.binder = StepBinder(self, ctx)
        self.resumed = False
        """The call goes on with a step an earlier process published."""
        self.stop = CallStop()
        """The call's interrupt; its waits are cut by it (`waiting()`)."""

    async def commit(self, rows: list[RowModel]) -> None:
        rows = await traced_bind(self, rows)  # a bind's turn_started: the trace's digests
        await self.ctx.journal.commit(rows, stamped=False)  # the rows are kept as dicts
        committed = [row.model_dump() for row in rows]
        self.rows += committed
        self.ctx.records.add(committed)
        if self.ctx.placer is not None:  # a run on git: what an executor's harvest reads
            executor_git.keep(committed, self.ctx.git_rows)
        if self.ctx.on_commit is not None:
            self.ctx.on_commit(committed)

    async def run(self) -> CallEnd:
        """Take the call to its terminal row. A host that cannot be reached raises
        HostUnavailable out of it with the call's rows as they are: the run pauses,
        and a resumed process goes on with the call in place. A pause, a
        cancellation or the node's timeout interrupts it (HARV-28..30): it ends
        held for that reason."""
        with self.ctx.control.enter(self.node.timeout) as self.stop:
            try:
                return await self._run()
            except Interrupted as stopped:
                return await interrupt_call(self, str(stopped))

    async def _run(self) -> CallEnd:
        step: StepPublished | CallEnd
        if self.state.prepared is None:
            step = await self._prepare()
        else:  # the directory an earlier process made, or meant to make
            await self._make_workspace()
            # The flow evidence record's copies its rows name.
            await evidence_records.restore(self.rows, self.ctx.run_id, self.call)
            if interrupt.held_by_pause(self.state.ended):  # the run resumed after a pause
                self.state.retry, self.state.ended = self.state.ended, None
            if self.state.retry is not None:  # a held call answered retry, or paused
                step = await go_on_in_place(self)
            else:
                step = await self.current_step()
        while True:
            if isinstance(step, CallEnd):
                return step
            thread_id, followed = await self._attempt(step)
            if isinstance(followed, CallEnd):  # the interrupt an earlier process asked for
                return followed
            if isinstance(followed, lost.Lost):
                await self.commit([lost.lost_row(self.call, step, thread_id, followed)])
                step = await self._after_lost(step, thread_id)
                continue
            turn, thread = followed.turn, followed.thread
            if step.action == "spawn":  # a spawn of the step made after its bind
                await self.binder.close_strays(step, thread_id, thread)
            seen = _tokens(step.tokens_seen)
            total = await rollout_total(_path(thread.path))
            spent = outcome.turn_tokens(total, seen) if total is not None else NO_TOKENS
            call_tokens = _tokens(step.call_tokens) + spent
            self.spent.count(self.call, call_tokens)
            end = await off_loop.decide(
                self.call,
                self.node.output_schema,
                turn,
                call_tokens,
                repaired=bool(step.repair),
                attempt=step.attempt or 1,
                k=step.k,
                max_bytes=self.ctx.settings.answer_max_bytes,
            )
            unmeasured: list[RowModel] = [] if total is not None else [self._unmeasured(step)]
            unmeasured += await trace_warnings(self, step)  # recorded, never enforced
            if end.row is not None:
                git = await self._executor_git(end.row, step.attempt or 1)
                await self.commit([*unmeasured, *git.rows(end.row)])
                held = await executor_git.apply(git, self.call)  # the refs, after the rows
                if held is not None:
                    await self.commit([held])
                    end = CallEnd(held)
                # Not synced: a resumed process publishes it again (`close_left_open`).
                await self.close_subagent(step.attempt or 1, thread_id, durable=False)
                return end
            if unmeasured:
                await self.commit(unmeasured)
            assert end.repair is not None  # no row: the repair turn
            step = await self._repair(step, thread, end.repair, total or seen, call_tokens)

    async def _executor_git(self, end: RowModel, attempt: int) -> executor_git.Effects:
        """An executor's pending tree, HEAD and crw.commit, read before its rows."""
        return await executor_git.prepare(
            end,
            self.allocation,
            self.ctx.placer,
            self.ctx.git_rows,
            node=self.node.id,
            call=self.call,
            attempt=attempt,
            clock=self.ctx.clock,
        )

    async def _prepare(self) -> StepPublished:
        """The prepared rows and the first step's row, one batch (one fsync): both
        intents are durable before either effect, the directory P and then the
        step's files (STEP-21). A process that dies after the batch leaves a last
        row step_published; one of an older crw may leave prepared alone."""
        step = self._spawn_step(k=1, attempt=1, conversation_turn=1)
        if self.allocation is None:
            self.allocation = await self._allocate()
        await self.commit([*self.prepared_rows(), step])
        # P after the prepared row is durable (STEP-2), then the step's files: in one
        # worker-thread hop when the placer makes P or a sync is made (a hop costs the
        # run's loop its scheduling and hand-off), in the loop's thread when P is one
        # mkdir and nothing is synced.
        if self.ctx.placer is None and not self.durable_packet:
            await trio.lowlevel.checkpoint_if_cancelled()
            self._make_p()
            await self.steps.write(step)
        else:
            await self.steps.write(step, before=self._make_p)
        return step

    @property
    def durable_packet(self) -> bool:
        """Whether a later call's packet may name this call's packets: a reviewed
        node's call, which its fix calls continue (its packets are synced)."""
        return self.node.review is not None

    def prepared_rows(self) -> list[RowModel]:
        """The rows that open the call: its prepared row."""
        allocation = self.allocation or Allocation(workspace=str(self.workspace), kind="directory")
        digest = answer.digest({"task": self.task, "schema": self.node.output_schema})
        return [
            Prepared(
                call=self.call,
                node=self.node.id,
                role=self.node.role,
                backend="session",
                allocation=allocation,
                input_digest=digest,
            )
        ]

    async def _allocate(self) -> Allocation:
        """The new call's allocation, decided by the run's placer."""
        placer = self.ctx.placer
        if placer is None:
            return Allocation(workspace=str(self.workspace), kind="directory")
        node = self.node
        if placer.reads_ref(node.role, node.qa):
            allocation = await trio.to_thread.run_sync(
                placer.allocate, self.call, node.id, node.role, node.qa
            )
        else:  # a decision only: a worker thread's hop would cost more
            allocation = placer.allocate(self.call, node.id, node.role, node.qa)
        self.workspace = Path(str(allocation.workspace))
        return allocation

    async def _make_workspace(self) -> None:
        """Make P, or restore it as its allocation says (a P that exists is kept)."""
        await trio.to_thread.run_sync(self._make_p)

    def _make_p(self) -> None:
        """`_make_workspace`'s work, blocking: for a worker thread."""
        placer, allocation = self.ctx.placer, self.allocation
        if placer is None or allocation is None:
            self.workspace.mkdir(mode=PRIVATE_DIR, parents=True, exist_ok=True)
        else:
            placer.make(allocation, self.node.id)

    async def current_step(self) -> StepPublished | CallEnd:
        """The step the call goes on with: the newest published one, the next
        attempt after a lost one (ATT-29), or the first."""
        if self.state.step is not None:
            # A step an earlier process published: the binder answers its waiting
            # reports first, then looks it up, and only then writes it again.
            self.resumed = self.state.turn is None
            step = StepPublished.model_validate(dict(self.state.step))
            # The call's tokens the dead process counted are in no terminal row:
            # they count against the run's figure now, when they are taken (HARV-22).
            self.spent.count(self.call, _tokens(step.call_tokens))
            if self.state.lost is not None:
                return await self._after_lost(step, self.state.lost.get("agent_id"))
            return step
        return await self.publish(self._spawn_step(k=1, attempt=1, conversation_turn=1))

    async def publish(self, step: StepPublished) -> StepPublished:
        """Commit the step's intent, then write its files (STEP-21)."""
        await self.commit([step])
        await self.steps.write(step)
        return step

    async def _attempt(self, step: StepPublished) -> tuple[str, lost.Ended | lost.Lost | CallEnd]:
        """Bind `step`'s turn and follow it until it ends or its attempt is lost;
        a turn an earlier process asked to interrupt ends the call held (HARV-38)."""
        bound = await self._bound_turn(step)
        if isinstance(bound, lost.Lost):
            return str(self.state.bound_thread_id), bound
        if isinstance(bound, CallEnd):  # the host refused the spawn: held spawn_failed
            return "", bound
        thread_id, turn_id = bound
        found = interrupt.intent(self.rows)
        if found is not None and interrupt.applies(found, step, turn_id):  # HARV-37
            return thread_id, await interrupt_call(self, found.reason, found.error, requested=True)
        try:
            with self.stop.waiting():
                ended = await follow(
                    self.ctx.reader,
                    self.ctx.settings,
                    thread_id,
                    turn_id=turn_id,
                    bound=self.binder.take_read(thread_id),
                )
        except ModelUnreachable as unreached:  # HARV-14: the host only retries the turn
            return thread_id, await interrupt_call(self, outcome.HOST_FAILURE, str(unreached))
        assert not isinstance(ended, lost.Found)
        return thread_id, ended

    async def _after_lost(
        self, step: StepPublished, agent_id: str | None
    ) -> StepPublished | CallEnd:
        """The old subagent's close step (ATT-9), then the next attempt's spawn step
        in the same allocation (ATT-10, STEP-24), or past the attempt budget the call
        held attempts_exhausted."""
        if agent_id:
            await self.close_subagent(step.attempt or 1, agent_id)
        following = lost.after_lost(self.call, step, self.ctx.settings.max_attempts)
        if isinstance(following, Held):
            await self.commit([following])
            return CallEnd(following)
        spawn = self._spawn_step(
            k=following.k,
            attempt=following.attempt,
            conversation_turn=following.conversation_turn,
            replaces_turn=following.replaces_turn,
            previous_answer=step_input.answer_in(self.rows, following.previous_answer_in),
            repair_errors=following.repair_errors,
        )
        spawn = spawn.model_copy(update={"call_tokens": step.call_tokens})
        spawn = step_input.refer(spawn, following.previous_answer_in)
        self.state.go_on_with(spawn.model_dump())
        return await self.publish(spawn)

    async def _bound_turn(self, step: StepPublished) -> tuple[str, str] | lost.Lost | CallEnd:
        """The subagent and turn of `step`: bound already (retract the step file a
        dead process left), adopted (last row thread_started), or bound now; or the
        call's end when the owner reports the host refused its spawn."""
        same_step = self.state.step is not None and self.state.step.get("k") == step.k
        thread_id = self.state.bound_thread_id
        if same_step and self.state.turn is not None and thread_id is not None:
            await trio.to_thread.run_sync(
                bus.retract_step, self.ctx.run, self.call, step.k or 1, step.attempt or 1
            )
            return thread_id, str(self.state.turn["turn_id"])
        if same_step and step.action == "spawn" and thread_id is not None:
            return await self._adopt(step, thread_id)
        return await self.binder.await_bind(step)

    async def _adopt(self, step: StepPublished, thread_id: str) -> tuple[str, str] | lost.Lost:
        """Last row thread_started: adopt the subagent, write only turn_started; one
        the host does not know, or shows dead, for LostAfter loses the attempt (ATT-23)."""
        with self.stop.waiting():
            found = await follow(
                self.ctx.reader, self.ctx.settings, thread_id, turn_id=None, marker=step.marker
            )
        if isinstance(found, lost.Lost):
            return found
        assert isinstance(found, lost.Found)
        await self.commit([self._turn_started(step, found.turn_id, found.started_at)])
        await trio.to_thread.run_sync(
            bus.retract_step, self.ctx.run, self.call, step.k or 1, step.attempt or 1
        )
        return thread_id, found.turn_id

    async def _repair(
        self,
        step: StepPublished,
        thread: Thread,
        named: harvest.Repair,
        seen: Tokens,
        call_tokens: Tokens,
    ) -> StepPublished:
        """The one repair: send_input on the open subagent, a spawn when it is closed."""
        repair = self.repair_step(step, thread, named, seen, call_tokens)
        self.state.go_on_with(repair.model_dump())
        return await self.publish(repair)

    async def close_subagent(self, attempt: int, agent_id: str, *, durable: bool = True) -> None:
        """The subagent's close step, once the call has its terminal row (HARV-56).
        One that is not `durable` (no fsync: a few small syscalls) is written in the
        loop's thread, where a worker-thread hop would cost more than the write
        (`Inbox.reply`); a durable one waits for its fsyncs in a worker thread.
        The reader drops what it holds of the subagent (its last read, every item
        of its turns): a run's memory grows with its calls in flight, not with the
        calls it ran. On multi-agent v2 there is none: an idle child holds no slot
        and v2 has no close_agent (docs/session.md, "Multi-agent v2")."""
        self.ctx.reader.forget(agent_id)
        if self.ctx.multi_agent == "multi_agent_v2":
            return
        if not durable:
            await trio.lowlevel.checkpoint_if_cancelled()
            bus.write_close(self.ctx.run, self.call, attempt, agent_id, durable=False)
            return
        await trio.to_thread.run_sync(bus.write_close, self.ctx.run, self.call, attempt, agent_id)


def _tokens(value: Tokens | None) -> Tokens:
    return value if value is not None else NO_TOKENS


def _path(path: str | None) -> Any:
    return Path(path) if path else Path("/nonexistent-rollout")
