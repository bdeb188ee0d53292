"""A reviewed node's calls on the session backend: the call, its reviews and fixes.

`run_rounds` runs the calls `crw.engine.calls.review` decides, one after another, each a
`SessionCall` going on from its own rows, so a process that resumes a run inside
a round goes on from the round's last row. A review call ends held
review_rejected when it rejects after the last fix round; a fix call is a
continuation of the node's conversation (`crw.engine.calls.conversation`): a spawn step
on a new subagent, its packet the journal's record of the handle's turns and a
file with the handle's answer, refused pair_refused when the role's decided pair
differs from the pair the handle's subagent ran, or when the review's fix_effort
(the effort its steps ask for where the role's is undecided) differs from the
effort that subagent ran.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, MutableMapping
from pathlib import Path
from typing import Any

from crw.actors.session_call import SessionCall
from crw.actors.session_context import SessionContext
from crw.engine.answers import harvest
from crw.engine.answers.harvest import CallEnd
from crw.engine.calls import conversation, review, rounds
from crw.engine.calls.gate import RunSpent, call_id
from crw.engine.config.template import render_task
from crw.engine.config.workflow_nodes import Node, Review
from crw.engine.holds import interrupt
from crw.engine.run.rundir import PRIVATE_DIR
from crw.host.protocol import Thread
from crw.journal.rows import (
    Allocation,
    CheckpointStarted,
    Held,
    Prepared,
    RowModel,
    StepPublished,
    Tokens,
    parse_row,
)
from crw.private import write_atomic
from crw.workspace.placer import allocation_of

Rows = list[dict[str, Any]]


class ReviewCall(SessionCall):
    """A review call: its terminal row is settled by the round it is in."""

    def __init__(self, *args: Any, review: Review, ordinal: int) -> None:
        super().__init__(*args)
        self.review, self.ordinal = review, ordinal

    @property
    def durable_packet(self) -> bool:
        """No call continues a review call: its packets are not synced."""
        return False

    def prepared_rows(self) -> list[RowModel]:
        """The prepared row names the call it judges."""
        judged = review.judged_call(self.call)
        return [
            row.model_copy(update={"review": judged}) if isinstance(row, Prepared) else row
            for row in super().prepared_rows()
        ]

    async def commit(self, rows: list[RowModel]) -> None:
        settled = [review.settle_review(self.review, self.ordinal, row) for row in rows]
        await super().commit(settled)


class ContinuationCall(SessionCall):
    """A fix call: continues `handle`'s conversation in the node's workspace (the
    build call's allocation, `shared`, which every fix round shares); its
    steps ask for `effort` when it is given (the review's fix_effort)."""

    def __init__(self, *args: Any, handle: str, shared: Allocation, answer: Any) -> None:
        super().__init__(*args)
        self.handle, self.answer = handle, answer
        if self.allocation is None:  # the build call's, which every fix round shares
            self.allocation = shared
        self.workspace = Path(str(self.allocation.workspace))
        self.effort: str | None = None
        self.digest = ""
        self.checkpoint: str | None = None

    @property
    def durable_packet(self) -> bool:
        """A later fix call may continue this one: its packets are synced."""
        return True

    def _spawn_step(
        self, *, k: int, attempt: int, conversation_turn: int, note: str | None = None, **extra: Any
    ) -> StepPublished:
        step = super()._spawn_step(
            k=k, attempt=attempt, conversation_turn=conversation_turn, note=note, **extra
        )
        return self._asking(step)

    def repair_step(
        self,
        step: StepPublished,
        thread: Thread,
        named: harvest.Repair,
        seen: Tokens,
        call_tokens: Tokens,
    ) -> StepPublished:
        return self._asking(super().repair_step(step, thread, named, seen, call_tokens))

    def _asking(self, step: StepPublished) -> StepPublished:
        """`step` with the explicit effort, which its step file hands the owner's
        spawn as reasoning_effort."""
        return step if self.effort is None else step.model_copy(update={"effort": self.effort})

    def prepared_rows(self) -> list[RowModel]:
        assert self.allocation is not None
        taken: list[RowModel] = [
            _prepared(self.call, self.node, self.handle, self.allocation, self.digest)
        ]
        if self.checkpoint is not None:
            taken.append(
                CheckpointStarted(call=self.call, handle=self.handle, branch=self.checkpoint)
            )
        return taken

    def _make_p(self) -> None:
        """The node's workspace (made if missing); the answer file the packet names is written
        after the prepared row, from the handle's completed row (STEP-54). Blocking: in the
        worker thread that makes P (and writes a new call's first step)."""
        super()._make_p()
        path = answer_path(self.ctx, self.call, self.handle)
        text = json.dumps(self.answer, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
        _write(path, text)


def answer_path(ctx: SessionContext, call: str, handle: str) -> Path:
    """steps/<call>/answer-<handle>.json: the continued call's answer."""
    return ctx.run.steps / call / f"answer-{handle}.json"


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(mode=PRIVATE_DIR, parents=True, exist_ok=True)
    write_atomic(path, text.encode("utf-8"))


def _prepared(call: str, node: Node, handle: str, allocation: Allocation, digest: str) -> Prepared:
    return Prepared(
        call=call,
        node=node.id,
        role=node.role,
        backend="session",
        allocation=allocation,
        input_digest=digest,
        resume=handle,
    )


async def run_rounds(
    ctx: SessionContext,
    node: Node,
    needs: Mapping[str, Any],
    by_call: MutableMapping[str, Rows],
    journal: Rows,
    spent: RunSpent,
    first: int = 1,
) -> CallEnd:
    """Run `node`'s calls until the node is over; its end for the gate. `journal`
    is the run's rows in order (those read at start, then each call's new ones).
    `first`: the ordinal the node's calls start at (a restarted node's new call);
    the rounds' ordinals count from it."""
    task = render_task(node.task, needs)
    while True:
        action = review.next_action(node.review, review.ends_of(node.id, by_call, first))
        if isinstance(action, review.Finish):
            row = action.row
            return CallEnd(row if isinstance(row, RowModel) else parse_row(dict(row)))
        call = call_id(node.id, first - 1 + action.ordinal)
        actor = await _actor(ctx, node, task, needs, action, by_call, journal, spent, first)
        if actor is None:
            continue  # the continuation was refused: its held row ends the node
        known = len(actor.rows)
        end = await actor.run()
        journal.extend(actor.rows[known:])
        by_call[call] = actor.rows
        if end.pause is not None or interrupt.held_by_pause(actor.rows[-1]):
            return CallEnd(parse_row(actor.rows[-1]), end.pause)  # a pause: the round waits


async def _actor(
    ctx: SessionContext,
    node: Node,
    task: str,
    needs: Mapping[str, Any],
    action: review.RunCall,
    by_call: MutableMapping[str, Rows],
    journal: Rows,
    spent: RunSpent,
    first: int,
) -> SessionCall | None:
    call = call_id(node.id, first - 1 + action.ordinal)
    rows = by_call[call]
    if action.kind == "node":
        return SessionCall(ctx, node, call, needs, rows, spent)
    build = call_id(node.id, first)
    shared = allocation_of(by_call.get(build, ())) or Allocation(
        workspace=str(ctx.run.calls / build), kind="directory"
    )
    if action.kind == "review":
        return _review(ctx, node, task, action, by_call, spent, shared, first)
    return await _continuation(ctx, node, task, action, by_call, journal, spent, shared, first)


def _review(
    ctx: SessionContext,
    node: Node,
    task: str,
    action: review.RunCall,
    by_call: MutableMapping[str, Rows],
    spent: RunSpent,
    shared: Allocation,
    first: int,
) -> ReviewCall:
    """The review call: the review role judges the subject's answer, read in the
    build call's P; the review call works in its own checkout."""
    assert node.review is not None
    call = call_id(node.id, first - 1 + action.ordinal)
    ends = review.ends_of(node.id, by_call, first)
    judge = rounds.review_node(node, task, action, ends, str(shared.workspace), first)
    rows = by_call[call]
    return ReviewCall(ctx, judge, call, {}, rows, spent, review=node.review, ordinal=action.ordinal)


async def _continuation(
    ctx: SessionContext,
    node: Node,
    task: str,
    action: review.RunCall,
    by_call: MutableMapping[str, Rows],
    journal: Rows,
    spent: RunSpent,
    shared: Allocation,
    first: int,
) -> ContinuationCall | None:
    """The fix call, continuing the handle's conversation; None when the pair
    rules refused it (its held row is committed)."""
    call = call_id(node.id, first - 1 + action.ordinal)
    handle = call_id(node.id, first - 1 + (action.handle or 1))
    ends, answer_file = review.ends_of(node.id, by_call, first), str(answer_path(ctx, call, handle))
    fix = rounds.fix_node(node, task, action, ends, journal, answer_file, first)
    rows = by_call[call]
    actor = ContinuationCall(
        ctx, fix.node, call, {}, rows, spent, handle=handle, shared=shared, answer=fix.answer
    )
    assert node.review is not None
    actor.effort = review.fix_effort(node.review, actor.pair)
    actor.digest = conversation.input_digest(actor.task, node.output_schema, handle, fix.turns)
    if not any(row.get("row") == "step_published" for row in rows):
        bound = conversation.bound_pair(handle, journal)
        refusal = conversation.pair_refusal(actor.pair, bound, actor.effort)
        if refusal is not None:
            held = Held(call=call, reason=conversation.PAIR_REFUSED, error=refusal)
            refused: list[RowModel] = [held]
            if not rows:
                refused.insert(0, _prepared(call, node, handle, shared, actor.digest))
            await actor.commit(refused)
            by_call[call] = actor.rows
            journal.extend(actor.rows[len(rows) :])
            return None
    if conversation.in_resume_suffix(handle, journal):
        actor.checkpoint = conversation.CHECKPOINT
    return actor
