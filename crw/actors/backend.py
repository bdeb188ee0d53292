"""A run's calls on its backend, once the run process has its host: `Backend`.

Owns what each backend's run is made of (the App Server backend's `CallContext`;
the session backend's `SessionContext`, its inbox, run control and wake scheduler)
and the nursery its calls run in. Each backend's modules are imported by its runs
alone, when they start. It never takes a lock, writes the started row nor connects
to the host: the run process (`crw.actors.run`) does, before it hands over here.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import trio

from crw.actors import executor_git
from crw.actors.journal_writer import JournalWriter
from crw.clock import WallClock
from crw.codex_config import session_pool
from crw.engine.config.roles import RoleTable
from crw.engine.config.workflow import Workflow
from crw.engine.owner.multi_agent import V1, V2
from crw.engine.run.rundir import RunDir
from crw.engine.run.runspec import RunSpec
from crw.journal.replay import RunState
from crw.settings import Settings
from crw.workspace.placer import Placer
from crw.workspace.release import placer_of

if TYPE_CHECKING:
    from crw.actors.control import RunControl
    from crw.actors.host_reader import HostReader
    from crw.actors.wake import WakeScheduler


@dataclass(frozen=True)
class Backend:
    """What both backends' runs are made of, once the host is connected."""

    journal: JournalWriter
    reader: HostReader
    workflow: Workflow
    run_dir: RunDir
    spec: RunSpec
    roles: RoleTable
    settings: Settings
    clock: WallClock
    token: str | None
    """The process lock's token (the step index's name), if it holds one."""
    started_up: Callable[[], None]
    """Called once, just before the calls run: the process's start-up is done."""
    inputs: Mapping[str, Any] = field(default_factory=dict)
    """What `{inputs.NAME}` stands for in the run's tasks (`task_inputs`)."""

    @property
    def tmpdir(self) -> str | None:
        return self.spec.env.TMPDIR if self.spec.env else None

    @property
    def placer(self) -> Placer | None:
        """The run's placer, from run.json's repository and head (a run started
        without them, or outside any checkout, works in plain directories)."""
        return placer_of(self.spec, self.run_dir)

    async def app_server(self, rows: list[dict[str, Any]], replayed: RunState) -> str:
        # The App Server backend's modules are imported by its runs alone; the run
        # control (and the bus's step files) after the started row.
        from crw.actors.app_server_context import CallContext
        from crw.actors.app_server_run import run_app_server_calls
        from crw.actors.control import RunControl

        control = RunControl(run=self.run_dir)
        ctx = CallContext(
            journal=self.journal,
            reader=self.reader,
            workflow=self.workflow,
            run_dir=self.run_dir.root,
            tmpdir=self.tmpdir,
            pairs=self.roles.roles,
            control=control,
            placer=self.placer,
            git_rows=executor_git.keep(rows) if self.placer is not None else {},
            settings=self.settings,
            inputs=self.inputs,
        )
        async with trio.open_nursery() as nursery:
            await nursery.start(control.watch)  # a request waiting is read before any call
            self.started_up()
            state = await run_app_server_calls(ctx, self.spec.pool, replayed, rows)
            nursery.cancel_scope.cancel()
        return state

    async def session(self, rows: list[dict[str, Any]], replayed: RunState) -> str:
        # The session backend's modules are imported by its runs alone; the run
        # control and the call records after the started row.
        from crw.actors.control import RunControl
        from crw.actors.inbox import Inbox
        from crw.actors.session_context import SessionContext
        from crw.actors.session_run import answer_unrouted, run_session_calls
        from crw.actors.step_binder_v2 import owner_child
        from crw.engine.steps.replies import CallRecords

        records = CallRecords(rows)  # kept up to date by each call's commits
        reader, owner = self.reader, self.spec.owner or ""

        async def child_at(path: str) -> tuple[str | None, str | None]:
            return await owner_child(reader, owner, path)

        v2 = child_at if replayed.multi_agent == V2 else None  # reports name paths
        inbox = Inbox(
            self.run_dir,
            self.spec.id,
            self.settings,
            lambda report: answer_unrouted(records, self.reader.read, report, v2),
            token=self.token,
        )
        control = RunControl(run=self.run_dir)
        wakes = self._wakes(control, rows)
        ctx = SessionContext(
            journal=self.journal,
            reader=self.reader,
            inbox=inbox,
            workflow=self.workflow,
            run=self.run_dir,
            run_id=self.spec.id,
            owner=self.spec.owner or "",
            tmpdir=self.tmpdir,
            pairs=self.roles.roles,
            settings=self.settings,
            clock=self.clock,
            records=records,
            control=control,
            on_commit=wakes.saw if wakes is not None else None,
            placer=self.placer,
            git_rows=executor_git.keep(rows) if self.placer is not None else {},
            inputs=self.inputs,
            multi_agent=V2 if replayed.multi_agent == V2 else V1,
        )
        async with trio.open_nursery() as nursery:
            await nursery.start(control.watch)  # a request waiting is read before any call
            await nursery.start(inbox.run)
            if wakes is not None:
                await nursery.start(wakes.run)
            pool = session_pool(self.spec.pool, os.environ)  # agents.max_threads of today
            self.started_up()
            state = await run_session_calls(ctx, pool, replayed, rows)
            nursery.cancel_scope.cancel()
        return state

    def _wakes(self, control: RunControl, rows: list[dict[str, Any]]) -> WakeScheduler | None:
        """The run's wake scheduler, when it has an owner to wake."""
        if not self.spec.owner:
            return None
        from crw.actors.wake import WakeScheduler

        return WakeScheduler(
            journal=self.journal,
            reader=self.reader,
            run=self.run_dir,
            run_id=self.spec.id,
            owner=self.spec.owner,
            settings=self.settings,
            control=control,
            rows=rows,
        )
