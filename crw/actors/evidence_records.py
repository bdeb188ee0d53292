"""A session call's flow evidence records: the step's fields, the bind's
placement, the copies refreshed after a step, released and restored.

The decisions are `crw.workspace.evidence`'s; this module commits their rows and
makes their file effects, each row durable before the file it names. It reads
plain data (the call's rows, the run's id, the workflow and node) and commits
through the `commit` it is handed: it knows nothing of the call's object.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import trio

from crw.engine.config.workflow import Workflow
from crw.engine.config.workflow_nodes import Node
from crw.engine.held_fix import EVIDENCE_ASSIGNMENT_FAILED
from crw.engine.steps.bind import SpawnFailed
from crw.journal.rows import Held, RowModel, StepPublished, ThreadStarted
from crw.workspace import evidence

Commit = Callable[[list[RowModel]], Awaitable[None]]
"""The call's commit: its rows durable in the journal (`SessionCall.commit`)."""


def with_evidence(
    rows: Sequence[dict[str, Any]],
    step: StepPublished,
    *,
    workflow: Workflow,
    run_id: str,
    call: str,
    node: Node,
) -> StepPublished:
    """`step` with its evidence members (STEP-19, STEP-20) when it is a spawn step
    of a gated executor role in a run with an evidence cwd; else `step`. `rows`
    are the call's rows before the step."""
    if step.action != "spawn" or workflow.evidence_cwd is None:
        return step
    review = next((n.review for n in workflow.nodes if n.id == node.id), None)
    if review is None or not evidence.gated(node.role, review):
        return step
    record = evidence.assignment(
        run=run_id,
        call=call,
        node=node.id,
        role=node.role,
        step=step.model_dump(),
        gate=review.model_dump(),
    )
    fresh = not any(row.get("row") == "prepared" for row in rows)
    return step.model_copy(update=evidence.step_fields(rows, record, new_generation=fresh))


async def refresh(run_id: str, step: StepPublished) -> None:
    """After its row, rewrite the copies `step` names with its record. A copy
    that cannot be written is left: the bind writes the copy its subagent's cwd
    needs, and holds the call when it cannot."""
    if not step.evidence_assignment or step.call is None:
        return
    for cwd in step.evidence_cwds or ():
        path = evidence.record_path(cwd, run_id, step.call)
        try:
            await trio.to_thread.run_sync(evidence.write_record, path, step.evidence_assignment)
        except OSError:
            continue


async def place(
    step: StepPublished,
    started: ThreadStarted,
    *,
    rows: Sequence[dict[str, Any]],
    evidence_cwd: str | None,
    run_id: str,
    call: str,
    commit: Commit,
) -> ThreadStarted | SpawnFailed:
    """The bind's record: evidence_placed first when no row of the call's newest
    generation names the subagent's cwd (BIND-10), then the record there; the
    thread_started to commit, with evidence_cwd (BIND-4, BIND-11), or the hold of
    a record that cannot be placed (BIND-12, BIND-13). `rows` are the call's,
    `evidence_cwd` the workflow's."""
    if not step.evidence_assignment:
        return started  # most binds: nothing to read
    found = evidence.placement(rows, step.model_dump(), started.host_cwd, evidence_cwd)
    if found is None:
        return started
    if found.placed is not None:
        await commit([found.placed])
    path = evidence.record_path(found.cwd, run_id, call)
    try:
        await trio.to_thread.run_sync(evidence.write_record, path, found.record)
    except OSError as err:
        error = f"{err.filename or path}: {err.strerror or err}"
        held = Held(call=call, reason=EVIDENCE_ASSIGNMENT_FAILED, error=error)
        return SpawnFailed(held, f"{EVIDENCE_ASSIGNMENT_FAILED}: {error}")
    return started.model_copy(update={"evidence_cwd": found.cwd})


async def restore(rows: Sequence[dict[str, Any]], run_id: str, call: str) -> None:
    """A resumed call's copies from its rows (ROWS-10): every one its newest
    generation names holds its newest record again; an older one's are removed."""
    plan = evidence.restore(rows, run_id, call)
    for path in plan.remove:
        await trio.to_thread.run_sync(evidence.remove_record, path)
    record = plan.record
    if record is None:
        return
    for path in plan.write:
        try:
            await trio.to_thread.run_sync(evidence.write_record, path, record)
        except OSError:
            continue  # as after a step: the bind holds the call if its copy cannot be


async def release(run_id: str, call: str, rows: Sequence[dict[str, Any]]) -> None:
    """Remove every copy of `call`'s record its rows name (ROWS-9)."""
    for path in evidence.copies(rows, run_id, call):
        await trio.to_thread.run_sync(evidence.remove_record, path)
