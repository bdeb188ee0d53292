"""The run's part of every session call: what each call of the run shares.

A `SessionContext` is made once by the run (`crw.actors.run`) and handed to each
`SessionCall`; the call's parts (`step_binder`, `step_writer`, `held_call`,
`session_interrupt`, `call_trace`) are typed against the narrow face of it, or
of the call, that each reads, declared in its own module, so none imports the
call back.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from crw.actors import executor_git
from crw.actors.control import RunControl
from crw.actors.host_reader import HostReader
from crw.actors.inbox import Inbox
from crw.actors.journal_writer import JournalWriter
from crw.clock import WallClock
from crw.engine.config.roles import RolePair
from crw.engine.config.workflow import Workflow
from crw.engine.owner.multi_agent import MultiAgent
from crw.engine.run.rundir import RunDir
from crw.engine.steps.replies import CallRecords
from crw.settings import Settings
from crw.workspace.placer import Placer


@dataclass(frozen=True)
class SessionContext:
    """What a session call needs from its run; shared by every call of the run."""

    journal: JournalWriter
    reader: HostReader
    inbox: Inbox
    workflow: Workflow
    run: RunDir
    run_id: str
    owner: str
    tmpdir: str | None
    pairs: Mapping[str, RolePair]
    settings: Settings
    clock: WallClock
    records: CallRecords = field(default_factory=CallRecords)
    """Every call's record, from the rows read at start and each commit since."""
    control: RunControl = field(default_factory=RunControl)
    """The run's stop: a pause or cancellation interrupts every call in flight."""
    on_commit: Callable[[list[dict[str, Any]]], None] | None = None
    """Told every row a call commits (the wake scheduler's waiting steps)."""
    placer: Placer | None = None
    """Makes each call's P (None: a plain directory under the run, as without git)."""
    git_rows: executor_git.GitRows = field(default_factory=dict)
    """The run's prepared and crw_commit rows, which an executor's harvest reads
    (`crw.actors.executor_git`), kept as calls commit."""
    inputs: Mapping[str, Any] = field(default_factory=dict)
    """What `{inputs.NAME}` stands for in the run's tasks."""
    multi_agent: MultiAgent = "multi_agent_v1"
    """The run's multi-agent protocol (its started rows'): v1 binds by marker, v2
    by task name (`crw.actors.bind_v2`)."""
    strays: set[str] = field(default_factory=set)
    """The duplicates this process gave a close step (`StepBinder.close_strays`,
    `crw.actors.late_strays`): each gets one."""
