"""SessionConfig.Trace in a session call: the digests at each bind and harvest.

The digests and the warnings are `crw.workspace.trace`'s; this module only finds
where they are taken (P, the state directory, the run's repository, the host's
cwd for the bound subagent) and runs the digests in a worker thread. A bind's
digests ride on its turn_started row, so a resumed process compares the harvest
with the bind an earlier process recorded. Nothing here refuses or stops a call:
write isolation is recorded, never enforced (HARV-43).

It reads of its call only `TracedCall` (its id, role, workspace, rows, bound
thread, and of the run its settings, directory and id) and returns rows: it
commits and writes nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import trio

from crw.engine.calls.session_progress import CallProgress
from crw.engine.config.workflow_nodes import Node
from crw.engine.run.rundir import RunDir
from crw.engine.run.runspec import read_run_spec
from crw.errors import CrwError
from crw.journal.rows import RowModel, StepPublished, ThreadStarted, TurnStarted
from crw.settings import Settings

if TYPE_CHECKING:  # the trace (git) is imported by a run that takes it alone
    from crw.workspace import trace


class TracedRun(Protocol):
    """What the trace reads of the call's run (`SessionContext`)."""

    @property
    def settings(self) -> Settings: ...
    @property
    def run(self) -> RunDir: ...
    @property
    def run_id(self) -> str: ...


class TracedCall(Protocol):
    """What the trace reads of a call (`SessionCall`)."""

    @property
    def ctx(self) -> TracedRun: ...
    @property
    def call(self) -> str: ...
    @property
    def node(self) -> Node: ...
    @property
    def workspace(self) -> Path: ...
    @property
    def rows(self) -> list[dict[str, Any]]: ...
    @property
    def state(self) -> CallProgress: ...


async def traced_bind(actor: TracedCall, rows: list[RowModel]) -> list[RowModel]:
    """`rows` as the call commits them: a bind's turn_started (a spawn's, a repair's,
    an adopted turn's) carries the digests taken now (HARV-44); rows of a run
    without the trace, or with no turn_started, are as they were."""
    if not actor.ctx.settings.trace or not any(isinstance(r, TurnStarted) for r in rows):
        return rows
    started = next((row for row in rows if isinstance(row, ThreadStarted)), None)
    host_cwd = (
        started.host_cwd if started is not None else (actor.state.thread or {}).get("host_cwd")
    )
    from crw.workspace import trace

    site = await _site(actor, host_cwd if isinstance(host_cwd, str) else None)
    digests = await trio.to_thread.run_sync(trace.at_bind, site)
    return [
        row.model_copy(update={"trace": digests}) if isinstance(row, TurnStarted) else row
        for row in rows
    ]


async def trace_warnings(actor: TracedCall, step: StepPublished) -> list[RowModel]:
    """The flow warnings of the harvest of `step`'s turn: its digests now against
    those its bind recorded (HARV-45..47); none when the bind recorded none."""
    if not actor.ctx.settings.trace:
        return []
    from crw.workspace import trace

    before = trace.bind_digests(actor.rows, step.k or 1, step.attempt or 1)
    if before is None:
        return []
    site = await _site(actor, None)
    after = await trio.to_thread.run_sync(trace.at_harvest, site, before)
    return trace.warnings(actor.call, actor.node.role, before, after, site)


async def _site(actor: TracedCall, host_cwd: str | None) -> trace.Site:
    from crw.workspace import trace

    run = actor.ctx.run
    return trace.Site(
        workspace=Path(actor.workspace),
        state=run.root.parent.parent,  # <state>/flow/<run>
        run_id=actor.ctx.run_id,
        repository=await trio.to_thread.run_sync(_repository, run.run_json),
        host_cwd=Path(host_cwd) if host_cwd else None,
    )


def _repository(run_json: Path) -> Path | None:
    """The run's repository as its run.json records it (None: none, or no run.json)."""
    try:
        recorded = read_run_spec(run_json).repository
    except CrwError:
        return None
    return Path(recorded) if recorded else None
