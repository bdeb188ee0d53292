"""The call actor of the app-server backend: the run opens a thread per call itself.

One Trio task per admitted call. Its life, each step a row committed through the
journal writer before the run goes on:

    prepared            the allocation: a directory P under the run (git
                        workspaces come later), made after the row
    thread_started      thread/start with P as cwd and the packet's tool entries
                        as leaf `shell_environment_policy.set.<NAME>` config keys
    turn_started        turn/start with the packet as its text (k 1), or the
                        repair turn (k 2) when the first answer breaks the schema
    completed | null_model | held, or the run's paused

Everything it decides is decided by the engine's pure functions (`answer.judge`,
`outcome.failure_outcome`, the token arithmetic); this module only moves data
between them, the journal and the host reader.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from crw.actors.app_server_interrupt import stop_turn
from crw.actors.control import CallStop, Interrupted, RunControl
from crw.actors.host_reader import HostReader
from crw.actors.journal_writer import JournalWriter
from crw.engine import answer, harvest, outcome, packet
from crw.engine.harvest import CallEnd
from crw.engine.role_names import WRITING_ROLES
from crw.engine.roles import RolePair
from crw.engine.template import render_task
from crw.engine.workflow import Node, Workflow
from crw.host.protocol import Turn
from crw.host.transport import HostUnavailable
from crw.journal.rows import (
    Allocation,
    Held,
    Prepared,
    ThreadStarted,
    Tokens,
    TurnStarted,
)


@dataclass(frozen=True)
class CallContext:
    """What a call needs from its run; shared by every call of the run."""

    journal: JournalWriter
    reader: HostReader
    workflow: Workflow
    run_dir: Path
    tmpdir: str | None
    pairs: Mapping[str, RolePair]
    control: RunControl = field(default_factory=RunControl)
    """The run's stop: a pause or cancellation interrupts every call in flight."""


class _Turn:
    """One turn of the call on its thread: started, waited for, measured."""

    def __init__(self, ctx: CallContext, call: str, thread_id: str, stop: CallStop) -> None:
        self.ctx, self.call, self.thread_id, self.stop = ctx, call, thread_id, stop

    async def run(self, k: int, text: str, conversation_turn: int) -> tuple[Turn, Tokens]:
        before = self._total()
        turn = await self.ctx.reader.start_turn(self.thread_id, text)
        op = packet.op(self.call, k)
        await self.ctx.journal.commit(
            [
                TurnStarted(
                    call=self.call,
                    k=k,
                    op=op,
                    turn_id=turn.id,
                    attempt=1,
                    marker=packet.marker(self.call, k, 1),
                    conversation_turn=conversation_turn,
                )
            ]
        )
        try:
            with self.stop.waiting():
                ended = await self.ctx.reader.wait_turn(self.thread_id, turn.id)
        except Interrupted as stopped:
            spent, ctx = self._total() - before, self.ctx
            end = await stop_turn(
                ctx.journal, ctx.reader, self.call, k, self.thread_id, turn.id, str(stopped), spent
            )
            raise _Stopped(end) from None
        return ended, self._total() - before

    def _total(self) -> Tokens:
        usage = self.ctx.reader.usage(self.thread_id)
        return outcome.tokens_from_usage(usage.total.model_dump()) if usage else Tokens()


async def run_app_server_call(
    ctx: CallContext, node: Node, call: str, results: Mapping[str, Any]
) -> CallEnd:
    """Run one call to its end; `results` are the results of the node's needs."""
    workspace = ctx.run_dir / "calls" / call
    task = render_task(node.task, results)
    await ctx.journal.commit(
        [
            Prepared(
                call=call,
                node=node.id,
                role=node.role,
                backend="app-server",
                allocation=Allocation(workspace=str(workspace), kind="directory"),
                input_digest=answer.digest({"task": task, "schema": node.output_schema}),
            )
        ]
    )
    workspace.mkdir(parents=True, exist_ok=True)
    try:
        with ctx.control.enter(node.timeout) as stop:
            return await _run_thread(ctx, node, call, workspace, task, stop)
    except _Stopped as stopped:
        return stopped.end
    except HostUnavailable as err:
        row = Held(call=call, reason="host_failure", error=str(err))
        await ctx.journal.commit([row])
        return CallEnd(row)


class _Stopped(Exception):
    """The call was interrupted and held: `end` is its end."""

    def __init__(self, end: CallEnd) -> None:
        self.end = end


async def _run_thread(
    ctx: CallContext, node: Node, call: str, workspace: Path, task: str, stop: CallStop
) -> CallEnd:
    go_root = ctx.workflow.verifier.go_root if ctx.workflow.verifier else None
    entries = packet.tool_entries(ctx.tmpdir, go_root)
    pair = ctx.pairs.get(node.role)
    thread = await ctx.reader.start_thread(
        cwd=str(workspace),
        config=packet.shell_environment_config(entries, os.environ.get("PATH")),
        approvalPolicy="never",
        **({"model": pair.model} if pair and pair.model else {}),
    )
    await ctx.journal.commit(
        [
            ThreadStarted(
                call=call,
                thread_id=thread.id,
                model=thread.model,
                effort=thread.reasoningEffort,
                cwd=str(workspace),
                host_cwd=thread.cwd if thread.cwd != str(workspace) else None,
                attempt=1,
                via="app-server",
                rollout_path=thread.path,
                marker=packet.marker(call, 1, 1),
            )
        ]
    )
    what = packet.Packet(
        call=call,
        role=node.role,
        workspace=str(workspace),
        task=task,
        output_schema=node.output_schema,
        tmpdir=ctx.tmpdir,
        go_root=go_root,
        run_json=str(ctx.run_dir / "run.json"),
        writes=node.role in WRITING_ROLES,
        workflow_file=str(ctx.workflow.path),
    )
    try:
        return await _run_turns(ctx, node, call, thread.id, what, stop)
    finally:
        ctx.reader.forget(thread.id)


async def _run_turns(
    ctx: CallContext, node: Node, call: str, thread_id: str, what: packet.Packet, stop: CallStop
) -> CallEnd:
    """The first turn, and the repair turn when its answer breaks the schema."""
    text = packet.app_server_turn_text(what, k=1, attempt=1)
    turns = _Turn(ctx, call, thread_id, stop)
    ended, spent = await turns.run(1, text, conversation_turn=1)
    end = harvest.decide(call, node.output_schema, ended, spent, repaired=False)
    if end.row is not None:
        return await _commit_end(ctx, end)
    verdict = answer.judge(harvest.messages(ended), node.output_schema)
    errors, previous = (
        (verdict.errors, verdict.raw_text)
        if isinstance(verdict, answer.Invalid)
        else ([answer.NO_OBJECT], "")
    )
    repair = packet.send_input_message(
        packet.marker(call, 2, 1), packet.repair_text(errors, previous, node.output_schema)
    )
    ended, more = await turns.run(2, repair, conversation_turn=2)
    return await _commit_end(
        ctx, harvest.decide(call, node.output_schema, ended, spent + more, repaired=True)
    )


async def _commit_end(ctx: CallContext, end: CallEnd) -> CallEnd:
    if end.row is not None:
        await ctx.journal.commit([end.row])
    return end
