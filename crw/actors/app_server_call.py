"""The call actor of the app-server backend: the run opens a thread per call itself.

One Trio task per admitted call. Its life, each step a row committed through the
journal writer:

    prepared            the allocation: P, as the run's placer decides it
    step_published      (`crw.workspace.placer`), made after the rows; the first
                        step's intent: its journaled input, the turn text
                        without the Repository tools section (STEP-57)
    thread_started      thread/start with P as cwd and the tool entries as leaf
                        `shell_environment_policy.set.<NAME>` config keys
    turn_started        turn/start with the step's text (k 1)
    step_published      the repair (k 2) when the first answer breaks the
    turn_started        schema: its text names the tools too
    completed | null_model | held, or the run's paused

Where a call begins (its first step, or where an earlier process left it) is
`crw.actors.app_server_life`'s to say; what it takes from its run is
`crw.actors.app_server_context`'s.

A row is durable before the effect it announces: the opening rows before P and
thread/start, thread_started before turn/start, a repair's step_published before
its turn/start. turn_started and the end (when no ref of an executor follows it)
announce no effect of their own, so the call does not wait for them: the journal
writer orders every later commit, and so every later effect, after them.

Everything it decides is decided by the engine's pure functions (`answer.judge`,
`harvest.decide`, `app_resume.decide`, the token reading); this module only moves
data between them, the journal and the host reader.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import trio

from crw.actors import executor_git, off_loop
from crw.actors.app_server_context import CallContext
from crw.actors.app_server_interrupt import stop_turn
from crw.actors.control import CallStop, Interrupted
from crw.actors.host_reader import ModelUnreachable
from crw.clock import system_clock
from crw.engine.answers import answer, harvest, outcome
from crw.engine.answers.harvest import CallEnd
from crw.engine.config.role_names import WRITING_ROLES
from crw.engine.config.template import render_task
from crw.engine.config.workflow_nodes import Node
from crw.engine.holds import app_resume
from crw.engine.run.rundir import PRIVATE_DIR
from crw.engine.steps import packet, step_input
from crw.host.protocol import Thread
from crw.journal.rows import (
    Allocation,
    Prepared,
    RowModel,
    StepPublished,
    ThreadStarted,
    Tokens,
    TurnStarted,
)
from crw.workspace.names import DIRECTORY
from crw.workspace.placer import allocation_of


class AppServerCall:
    """One call on its own thread: its packet, its tools, its turns."""

    END_BEHIND: ClassVar[bool] = True
    """Whether the call's end is committed behind (`commit`): the gate only
    admits, and every later effect is behind a commit of its own."""

    def __init__(
        self,
        ctx: CallContext,
        node: Node,
        call: str,
        results: Mapping[str, Any],
        workspace: Path | None = None,
        allocation: Allocation | None = None,
    ) -> None:
        self.ctx, self.node, self.call = ctx, node, call
        run = ctx.tools
        self.workspace = workspace or run.calls / call
        self.allocation = allocation
        """The call's allocation (a fix round's: its build call's); None until the
        placer decides it, or the call's prepared row is read."""
        self.task = render_task(node.task, results)
        self.pair = ctx.pairs.get(node.role)
        self.config = run.config
        self.tools = run.section
        self.packet = packet.Packet(
            call=call,
            role=node.role,
            workspace=str(self.workspace),
            task=self.task,
            output_schema=node.output_schema,
            tmpdir=ctx.tmpdir,
            go_root=run.go_root,
            run_json=run.run_json,
            writes=node.role in WRITING_ROLES,
            workflow_file=run.workflow_file,
        )
        self.stop = CallStop()
        """The call's stop, from the run's control once the call runs."""
        self.rollout: Path | None = None
        """The thread's rollout, read for its tokens when this process saw none of
        the host's token notifications for it (a resumed call)."""

    async def commit(self, rows: list[RowModel], *, behind: bool = False) -> None:
        """Commit `rows`, and return once they are durable; with `behind`, at once
        (`JournalWriter.commit_behind`: for rows no effect follows, since every
        later commit is durable only after them)."""
        if behind:
            await self.ctx.journal.commit_behind(rows)
        else:
            await self.ctx.journal.commit(rows, stamped=False)  # no copy of each row
        if self.ctx.placer is not None:  # a run on git: what an executor's harvest reads
            executor_git.keep((row.model_dump() for row in rows), self.ctx.git_rows)

    def opening(self) -> list[RowModel]:
        """The rows that open the call, before its first step: its prepared row."""
        return [self.prepared()]

    def prepared(self) -> Prepared:
        return Prepared(
            call=self.call,
            node=self.node.id,
            role=self.node.role,
            backend="app-server",
            allocation=self.allocation
            or Allocation(workspace=str(self.workspace), kind="directory"),
            input_digest=answer.digest({"task": self.task, "schema": self.node.output_schema}),
        )

    @property
    def model(self) -> str | None:
        return self.pair.model if self.pair else None

    def first_step(self) -> tuple[StepPublished, str]:
        """The first turn's step (its journaled input) and its text."""
        journaled = packet.journaled_input(self.packet, k=1, attempt=1)
        text = app_resume.turn_text(journaled, self.tools)  # the packet composed once
        return self._step(1, 1, 1, journaled, action="spawn"), text

    def _step(
        self, k: int, attempt: int, conversation_turn: int, journaled: str, **fields: Any
    ) -> StepPublished:
        return StepPublished(
            call=self.call,
            k=k,
            op=packet.op(self.call, k),
            marker=packet.marker(self.call, k, attempt),
            attempt=attempt,
            input=journaled,
            input_digest=answer.digest(journaled),
            role=self.node.role,
            model=self.model,
            conversation_turn=conversation_turn,
            **fields,
        )

    async def allocate(self, rows: Sequence[Mapping[str, Any]] = ()) -> None:
        """The call's allocation: its prepared row's, else the one it shares, else
        the placer's decision for a new call."""
        recorded = allocation_of(rows)
        if recorded is not None:
            self.allocation = recorded
        elif self.allocation is None and self.ctx.placer is not None:
            placer, node = self.ctx.placer, self.node
            if placer.reads_ref(node.role, node.qa):
                self.allocation = await trio.to_thread.run_sync(
                    placer.allocate, self.call, node.id, node.role, node.qa
                )
            else:  # a decision only: a worker thread's hop would cost more
                self.allocation = placer.allocate(self.call, node.id, node.role, node.qa)
        if self.allocation is not None and self.allocation.workspace:
            self.workspace = Path(self.allocation.workspace)

    async def make_workspace(self) -> None:
        """Make P, or restore it as its allocation says (a P that exists is kept)."""
        placer, allocation = self.ctx.placer, self.allocation
        if placer is not None and allocation is not None and allocation.kind != DIRECTORY:
            await trio.to_thread.run_sync(placer.make, allocation, self.node.id)
            return
        # In the run's thread, as the journal's fsync: a mkdir takes microseconds,
        # a hop to a worker thread and back a tenth of a millisecond. No schedule
        # point of its own: thread/start's send, next, is one.
        self.workspace.mkdir(mode=PRIVATE_DIR, parents=True, exist_ok=True)

    async def start_thread(self) -> str:
        """The call's thread (`open_thread`); its thread_started."""
        thread = await self.open_thread()
        await self.commit(
            [
                ThreadStarted(
                    call=self.call,
                    thread_id=thread.id,
                    model=thread.model,
                    effort=thread.reasoningEffort,
                    cwd=str(self.workspace),
                    host_cwd=thread.cwd if thread.cwd != str(self.workspace) else None,
                    attempt=1,
                    via="app-server",
                    rollout_path=thread.path,
                    marker=packet.marker(self.call, 1, 1),
                )
            ]
        )
        return thread.id

    async def open_thread(self) -> Thread:
        """thread/start in P with the leaf config keys (STEP-58)."""
        return await self.ctx.reader.start_thread(
            cwd=str(self.workspace), config=self.config, **self.overrides()
        )

    def overrides(self) -> dict[str, Any]:
        """The thread's own settings, with its config: never asks, the role's model."""
        model = self.model
        return {"approvalPolicy": "never"} | ({"model": model} if model else {})

    async def start_turn(self, thread_id: str, step: StepPublished, text: str) -> str:
        """turn/start with `text`; then its turn_started. The step's row came first.

        The call does not wait for turn_started: it announces a turn the host has
        already started, and what follows it is a read of the turn (no effect),
        then rows the writer orders after it (an interrupt's row before the
        interrupt is sent, HARV-35). A crash before it is durable leaves what a
        crash between turn/start and its commit always left: the resumed call
        adopts the turn that carries the step's marker."""
        turn = await self.ctx.reader.start_turn(thread_id, text)
        await self.commit([self.turn_started(step, turn.id)], behind=True)
        return turn.id

    async def resume_thread(self, thread_id: str) -> Thread:
        """thread/resume with the leaf config keys, so a thread the host rebuilt
        from its own configuration after a restart gets the entries again in its
        shell (STEP-59), and this connection its notifications; then its read."""
        await self.ctx.reader.resume_thread(thread_id, config=self.config)
        thread = await self.ctx.reader.read(thread_id)
        self.rollout = Path(thread.path) if thread.path else None
        return thread

    def turn_started(self, step: StepPublished, turn_id: str) -> TurnStarted:
        return TurnStarted(
            call=self.call,
            k=step.k,
            op=step.op,
            turn_id=turn_id,
            attempt=step.attempt,
            marker=step.marker,
            conversation_turn=step.conversation_turn,
            replaces_turn=step.replaces_turn,
        )

    async def turns(
        self, thread_id: str, step: StepPublished, turn_id: str | None, text: str
    ) -> CallEnd:
        """Run the step's turn (start it unless `turn_id` is bound), harvest it, and
        the repair turn when its answer breaks the schema; commit the end."""
        try:
            while True:
                started = turn_id is None
                if turn_id is None:
                    turn_id = await self.start_turn(thread_id, step, text)
                try:
                    with self.stop.waiting():
                        ended = await self.ctx.reader.wait_turn(
                            thread_id, turn_id, give_up=True, started=started
                        )
                except Interrupted as stopped:
                    return await self.stop_turn(thread_id, step, turn_id, str(stopped))
                except ModelUnreachable as unreached:
                    reason, error = outcome.HOST_FAILURE, str(unreached)
                    return await self.stop_turn(thread_id, step, turn_id, reason, error)
                end = await off_loop.decide(
                    self.call,
                    self.node.output_schema,
                    ended,
                    self.tokens(thread_id),
                    repaired=bool(step.repair),
                    attempt=step.attempt or 1,
                    k=step.k,
                    max_bytes=self.ctx.settings.answer_max_bytes,
                )
                if end.row is not None:
                    git = await self.executor_git(end.row, step.attempt or 1)
                    if git.moves_nothing and self.END_BEHIND:  # no ref follows: no wait
                        await self.commit(git.rows(end.row), behind=True)
                        return end
                    await self.commit(git.rows(end.row))
                    held = await executor_git.apply(git, self.call)  # the refs, after the rows
                    if held is not None:
                        await self.commit([held])
                        return CallEnd(held)
                    return end
                assert end.repair is not None  # no row: the repair turn
                step, text = self.repair_step(step, end.repair)
                await self.commit([step])
                turn_id = None
        finally:
            self.ctx.reader.forget(thread_id)

    async def executor_git(self, end: RowModel, attempt: int) -> executor_git.Effects:
        """An executor's pending tree, HEAD and crw.commit, read before its rows."""
        return await executor_git.prepare(
            end,
            self.allocation,
            self.ctx.placer,
            self.ctx.git_rows,
            node=self.node.id,
            call=self.call,
            attempt=attempt,
            clock=system_clock,
        )

    async def stop_turn(
        self,
        thread_id: str,
        step: StepPublished,
        turn_id: str,
        reason: str,
        error: str | None = None,
    ) -> CallEnd:
        """A pause, a cancellation, the deadline or a model the host cannot reach
        stopped the step's turn: it is interrupted, read until it ended, and the
        call held for the reason (with `error`, else the reason's own words)."""
        ctx, tokens = self.ctx, self.tokens(thread_id)
        stopping = (step, thread_id, turn_id)
        return await stop_turn(ctx.journal, ctx.reader, *stopping, reason, tokens, error)

    def repair_step(self, step: StepPublished, named: harvest.Repair) -> tuple[StepPublished, str]:
        """The repair's step (on the same thread) and its text, which names the
        tools as every App Server turn text does (STEP-61), naming what the harvest
        found (`named`)."""
        schema = self.node.output_schema
        errors, previous = named.errors, named.previous
        k, attempt = (step.k or 1) + 1, step.attempt or 1
        mark = packet.marker(self.call, k, attempt)
        journaled = packet.send_input_message(mark, packet.repair_text(errors, previous, schema))
        text = packet.send_input_message(
            mark, packet.repair_text(errors, previous, schema, self.tools)
        )
        repair = self._step(
            k,
            attempt,
            2,
            journaled,
            action="send_input",
            repair=True,
            repair_errors=errors,
            previous_answer=previous,
        )
        return step_input.fold(repair), text

    def tokens(self, thread_id: str) -> Tokens:
        """The call's tokens: its thread's total (the thread is the call's alone),
        as the host last reported it, else as its rollout says."""
        usage = self.ctx.reader.usage(thread_id)
        if usage is not None:
            return outcome.tokens_from_usage(usage.total.model_dump())
        if self.rollout is not None:
            return outcome.read_rollout_total(self.rollout) or Tokens()
        return Tokens()
