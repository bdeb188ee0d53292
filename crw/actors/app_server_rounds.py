"""A reviewed node's calls on the App Server backend: the call, its reviews and fixes.

The same round as on the session backend (`crw.engine.calls.review` decides each next
call from the calls' terminal rows, `crw.engine.calls.rounds` makes it), each call an
App Server call going on from its own rows (`crw.engine.holds.app_resume`), so a
process that resumes a run inside a round goes on from the round's last row.

A fix is a continuation (`resume: handle`) on a thread of its own, with its own
thread_started row (ATT-37, ATT-38), working in the node's workspace. It goes on
from the handle's thread: `thread/fork` of the thread the handle's newest
thread_started row names, through the handle's last turn, carrying the leaf keys
`shell_environment_policy.set.<NAME>` (STEP-58). Inside a resume's suffix (the
handle's rows were written by an earlier process) it never forks (ATT-39): it
takes the checkpoint branch, checkpoint_started before its thread, and starts a
thread whose turn text carries the journal's record of the handle's turns. Its
turn text carries that record on both branches (ATT-40, ATT-45), and names the
tools (STEP-56, STEP-61); its journaled input is the text without them (STEP-57).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, MutableMapping
from pathlib import Path
from typing import Any

import trio

from crw.actors.app_server_call import AppServerCall
from crw.actors.app_server_context import CallContext
from crw.actors.app_server_life import run_actor
from crw.engine.answers import outcome
from crw.engine.answers.harvest import CallEnd
from crw.engine.calls import conversation, review, rounds
from crw.engine.calls.gate import RunSpent, call_id
from crw.engine.config.template import render_task
from crw.engine.config.workflow_nodes import Node, Review
from crw.engine.holds import interrupt
from crw.engine.run.rundir import PRIVATE_DIR
from crw.host.protocol import Thread
from crw.journal.replay import TERMINAL_ROWS
from crw.journal.rows import CheckpointStarted, Held, Prepared, RowModel, Tokens, parse_row
from crw.private import write_atomic
from crw.workspace.placer import allocation_of

Rows = list[Mapping[str, Any]]


class RoundCall(AppServerCall):
    """A call of the round: the rows it commits are kept in `rows` (the call's)."""

    END_BEHIND = False
    """The round goes on from the call's end (its review, its next fix call, the
    node's end): the end is durable before the round's next row is made, so a
    crash between the two leaves the round where the kill drills leave it."""

    def __init__(self, *args: Any, rows: Rows, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.rows = rows

    async def commit(self, rows: list[RowModel], *, behind: bool = False) -> None:
        await super().commit(rows, behind=behind)
        self.rows.extend(row.model_dump(exclude_none=True) for row in rows)


class ReviewCall(RoundCall):
    """A review call: its terminal row is settled by the round it is in."""

    def __init__(self, *args: Any, review: Review, ordinal: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.review, self.ordinal = review, ordinal

    def prepared(self) -> Prepared:
        """The prepared row names the call it judges."""
        return super().prepared().model_copy(update={"review": review.judged_call(self.call)})

    async def commit(self, rows: list[RowModel], *, behind: bool = False) -> None:
        settled = [review.settle_review(self.review, self.ordinal, r) for r in rows]
        await super().commit(settled, behind=behind)


class FixCall(RoundCall):
    """A fix call: continues `fix.handle`'s conversation in the node's workspace."""

    def __init__(
        self, *args: Any, fix: rounds.Fix, journal: Rows, effort: str | None, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.handle, self.answer = fix.handle, fix.answer
        self.effort = effort
        """The review's fix_effort where the role leaves its effort undecided: a fork
        runs at its source thread's effort, so one that differs is refused."""
        self.digest = conversation.input_digest(
            self.task, self.node.output_schema, fix.handle, fix.turns
        )
        self.checkpoint = conversation.in_resume_suffix(fix.handle, journal)
        self.bound = conversation.bound_pair(fix.handle, journal) or {}
        """The handle's newest thread_started: the thread a fork goes on from."""
        self.source_turn = [turn for turn in fix.turns if turn.call == fix.handle][-1].turn_id
        self.inherited: Tokens | None = None
        """The total the fork's usage started from (read once)."""

    def prepared(self) -> Prepared:
        return (
            super()
            .prepared()
            .model_copy(update={"resume": self.handle, "input_digest": self.digest})
        )

    def opening(self) -> list[RowModel]:
        """The prepared row, and checkpoint_started in its batch inside a resume's
        suffix (ATT-39)."""
        return [self.prepared(), *([self._checkpoint()] if self.checkpoint else [])]

    def _checkpoint(self) -> CheckpointStarted:
        return CheckpointStarted(call=self.call, handle=self.handle, branch=conversation.CHECKPOINT)

    async def make_workspace(self) -> None:
        """The node's workspace (made if missing) and the answer file the turn text
        names, written after the prepared row from the handle's completed row."""
        await super().make_workspace()
        path = answer_file(self.ctx, self.call, self.handle)
        text = json.dumps(self.answer, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
        await trio.to_thread.run_sync(_write, path, text)

    async def open_thread(self) -> Thread:
        """A fork of the handle's thread through its last turn, with the leaf keys;
        inside a resume's suffix a thread started anew (checkpoint_started first,
        when the prepared row's batch did not hold it)."""
        if self.checkpoint:
            if not any(r.get("row") == "checkpoint_started" for r in self.rows):
                await self.commit([self._checkpoint()])
            return await super().open_thread()
        return await self.ctx.reader.fork_thread(
            str(self.bound["thread_id"]),
            last_turn_id=self.source_turn,
            config=self.config,
            cwd=str(self.workspace),
            **self.overrides(),
        )

    def tokens(self, thread_id: str) -> Tokens:
        """The fix's own tokens: a fork's usage goes on from its source's total (as
        the handle's rollout last counted it), which the handle's rows carry."""
        total = super().tokens(thread_id)
        if not rounds.forked(self.rows):
            return total
        if self.inherited is None:
            source = Path(str(self.bound.get("rollout_path")))
            self.inherited = outcome.read_rollout_total(source) or Tokens()
        return total - self.inherited

    def refusal(self) -> Held | None:
        """pair_refused when a decided part of the role's pair, or the explicit
        fix_effort, differs from the pair the handle's thread ran (DISP-21, DISP-23,
        DISP-24); judged before the first step."""
        if self.pair is None or any(r.get("row") == "step_published" for r in self.rows):
            return None
        why = conversation.pair_refusal(self.pair, self.bound or None, self.effort)
        return (
            None
            if why is None
            else Held(call=self.call, reason=conversation.PAIR_REFUSED, error=why)
        )


def answer_file(ctx: CallContext, call: str, handle: str) -> Path:
    """steps/<call>/answer-<handle>.json under the run: the continued call's answer."""
    return ctx.run_dir / "steps" / call / f"answer-{handle}.json"


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(mode=PRIVATE_DIR, parents=True, exist_ok=True)
    write_atomic(path, text.encode("utf-8"))


async def run_app_rounds(
    ctx: CallContext,
    node: Node,
    needs: Mapping[str, Any],
    by_call: MutableMapping[str, Rows],
    journal: Rows,
    spent: RunSpent,
) -> CallEnd:
    """Run `node`'s calls until the node is over; its end for the gate. `journal`
    is the run's rows in order (those read at start, then each call's new ones)."""
    task = render_task(node.task, needs)
    while True:
        ends = review.ends_of(node.id, by_call)
        action = review.next_action(node.review, ends)
        if isinstance(action, review.Finish):
            row = action.row
            return CallEnd(row if isinstance(row, RowModel) else parse_row(dict(row)))
        call = call_id(node.id, action.ordinal)
        rows = by_call.setdefault(call, [])
        known = len(rows)
        actor = _actor(ctx, node, (task, needs), action, ends, journal, rows)
        refused = actor.refusal() if isinstance(actor, FixCall) else None
        if refused is not None:
            await actor.commit([*([] if rows else [actor.prepared()]), refused])
            journal.extend(rows[known:])
            continue  # its held row ends the node
        end = await run_actor(actor, rows[:known])
        ended = [r["row"] for r in rows[known:] if r["row"] != "crw_commit"]  # after completed
        if end.row is not None and (not ended or ended[-1] not in TERMINAL_ROWS):
            rows.append(end.row.model_dump(exclude_none=True))  # held by an interrupt
        journal.extend(rows[known:])
        tokens = getattr(end.row, "tokens", None)
        if tokens is not None:
            spent.count(call, tokens)
        if end.pause is not None or interrupt.held_by_pause(rows[-1]):
            return CallEnd(parse_row(dict(rows[-1])), end.pause)  # a pause: the round waits


def _actor(
    ctx: CallContext,
    node: Node,
    given: tuple[str, Mapping[str, Any]],
    action: review.RunCall,
    ends: list[Mapping[str, Any]],
    journal: Rows,
    rows: Rows,
) -> RoundCall:
    """The actor of the round's next call: the node's, a review or a fix; `given`
    is the node's rendered task and the results of its needs."""
    task, needs = given
    call = call_id(node.id, action.ordinal)
    if action.kind == "node":
        return RoundCall(ctx, node, call, needs, rows=rows)
    build = call_id(node.id, 1)
    shared = allocation_of(row for row in journal if row.get("call") == build)
    workspace = Path(str(shared.workspace)) if shared else ctx.run_dir / "calls" / build
    if action.kind == "review":
        assert node.review is not None
        judge = rounds.review_node(node, task, action, ends, str(workspace))
        return ReviewCall(
            ctx, judge, call, {}, rows=rows, review=node.review, ordinal=action.ordinal
        )
    handle = call_id(node.id, action.handle or 1)
    fix = rounds.fix_node(node, task, action, ends, journal, str(answer_file(ctx, call, handle)))
    pair = ctx.pairs.get(node.role)
    effort = review.fix_effort(node.review, pair) if node.review and pair else None
    return FixCall(
        ctx,
        fix.node,
        call,
        {},
        rows=rows,
        workspace=workspace,
        allocation=shared,
        fix=fix,
        journal=journal,
        effort=effort,
    )
