"""The bind of a waiting step on codex's multi-agent v2: by the step's task name.

A run that speaks v2 (`SessionContext.multi_agent`) binds as `StepBinder` does on
v1, the same rows, replies and retries, but finds the subagent otherwise (docs/
session.md, "Multi-agent v2: binding by task name"): the owner's thread names
each child it spawned (a `subAgentActivity` item at `/root/<task_name>`), and
the child's thread its path; a follow-up's turn is the child's first after the
previous step's. A report's `--agent` is the child's path or its thread id. The
decisions are `crw.engine.steps.bind_v2`'s; these read the host for them, and
the binder (`crw.actors.step_binder`) acts on what they decide: its rows, its reply.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import trio

from crw.actors.host_reader import HostReader
from crw.actors.rollout_tokens import INLINE_ROLLOUT
from crw.engine.config.roles import RolePair
from crw.engine.steps import bind_v2
from crw.engine.steps.bind import AttemptState, Decision, PublishedStep, ReportLike
from crw.engine.steps.replies import call_record, reads_host
from crw.engine.steps.task_name import ROOT, agent_path
from crw.engine.steps.task_text import task_texts
from crw.host.errors import HostRequestError
from crw.host.protocol import Thread
from crw.host.transport import HostUnavailable
from crw.rawfile import read_bytes

ReadAgent = Callable[[str | None], Awaitable[tuple[Thread | None, str | None, bool]]]
"""The binder's read of a subagent: its thread, or why the host cannot answer now,
or that it has no such thread."""


@dataclass(frozen=True)
class StepRead:
    """What a v2 decision reads of the waiting step's call and run."""

    reader: HostReader
    run_id: str
    owner: str
    step: PublishedStep
    attempt: AttemptState
    pair: RolePair
    rows: Sequence[dict[str, Any]]
    read_agent: ReadAgent


async def owner_child(
    reader: HostReader, owner: str, path: str, *, fresh: bool = False
) -> tuple[str | None, str | None]:
    """The thread id of the owner's child at `path` (`/root/<name>`), else None and
    why the owner's thread could not be read (None: read, no such child yet). The
    owner is read once a poll for every waiting call (`crw.actors.owner_children`);
    `fresh`: from a read begun after this ask, when the child is not known yet."""
    try:
        return await reader.owner_children(owner).child(path, fresh=fresh), None
    except HostUnavailable as err:
        if not reader.connected:
            raise  # the host went away: the run pauses
        return None, str(err)
    except HostRequestError as err:
        return None, str(err)


async def child_tasks(thread: Thread | None) -> dict[str, str]:
    """The child's tasks by turn, from its rollout (`crw.engine.steps.task_text`):
    in the loop's thread when small, as a turn's token total is read."""
    if thread is None or thread.path is None:
        return {}
    path = thread.path
    try:
        small = os.stat(path).st_size <= INLINE_ROLLOUT
    except OSError:
        return {}
    if small:
        return read_task_texts(path)
    return await trio.to_thread.run_sync(read_task_texts, path)


def read_task_texts(path: str) -> dict[str, str]:
    """The tasks of the child whose rollout is `path`, by turn; none when the file
    cannot be read (gone, or not UTF-8)."""
    try:
        return task_texts(read_bytes(path).decode("utf-8"))
    except (OSError, UnicodeDecodeError):
        return {}


def previous_turn(rows: Sequence[dict[str, Any]]) -> str | None:
    """The turn id of the call's newest bound turn: a follow-up's turn comes after it."""
    for row in reversed(rows):
        if row.get("row") == "turn_started" and row.get("turn_id"):
            return str(row["turn_id"])
    return None


async def decide(
    read: StepRead, report: ReportLike, retries: dict[tuple[int, int, str | None], int]
) -> tuple[Decision, Thread | None]:
    """The answer to the owner's report on the waiting step, or on another step of
    the call, on v2; and the subagent as it read it. Counts a retry in `retries`."""
    step = read.step
    waiting = (report.k, report.attempt) == (step.k, step.attempt)
    named = report.agent_id or (step.agent_id if step.action == "send_input" else None)
    record = call_record(list(read.rows))
    late = not waiting and reads_host(report.agent_id, record, report.failed)
    agent, host_error = named, None
    if named is not None and named.startswith(ROOT):
        agent, host_error = await owner_child(read.reader, read.owner, named, fresh=True)
        if agent is None and host_error is None:
            host_error = f"the owner's thread names no child {named} yet"
    thread: Thread | None = None
    unknown = False
    if agent is not None and (waiting or late):
        thread, host_error, unknown = await read.read_agent(agent)
    key = (report.k, report.attempt, named)
    tasks = await child_tasks(thread) if waiting else {}
    decision = bind_v2.decide_report_v2(
        run_id=read.run_id,
        owner=read.owner,
        report=report,
        step=step,
        record=record,
        attempt=read.attempt,
        pair=read.pair,
        agent_id=agent,
        thread=thread,
        host_error=host_error,
        after_turn=previous_turn(read.rows) if step.action == "send_input" else None,
        tasks=tasks,
        unknown=unknown,
        retries=retries.get(key, 0),
    )
    if decision.kind == "retry":
        retries[key] = retries.get(key, 0) + 1
    return decision, thread


async def look_up(read: StepRead) -> tuple[Decision, Thread] | None:
    """The step's child on the host, never reported: a spawn's by its task name on
    the owner's thread, a follow-up's turn on the bound child (DISP-25, DISP-26);
    None while there is nothing to bind yet."""
    step = read.step
    if step.action == "send_input" and step.agent_id:
        agent: str | None = step.agent_id
    else:
        path = agent_path(bind_v2.step_task_name(step))
        agent, _ = await owner_child(read.reader, read.owner, path)
    if agent is None:
        return None
    thread, host_error, unknown = await read.read_agent(agent)
    if thread is None:
        return None
    decision = bind_v2.decide_bind_v2(
        read.owner,
        step,
        read.attempt,
        read.pair,
        agent,
        thread,
        host_error,
        after_turn=previous_turn(read.rows) if step.action == "send_input" else None,
        tasks=await child_tasks(thread),
        unknown=unknown,
    )
    if decision.kind == "retry":
        return None  # its turn is not there yet: the next poll looks again
    return decision, thread
