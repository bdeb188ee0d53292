"""What an App Server call takes from its run: the run's `CallContext` and its `RunTools`.

Owns the data every call of an App Server run shares (the journal writer, the host
reader, the workflow, the role pairs, the run's stop, its placer and settings) and
the tool entries and paths made once a run from them (STEP-58, STEP-60). It never
runs a call, talks to the host or writes a row: `crw.actors.app_server_call` does.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from crw.actors import executor_git
from crw.actors.control import RunControl
from crw.actors.host_reader import HostReader
from crw.actors.journal_writer import JournalWriter
from crw.engine.config.roles import RolePair
from crw.engine.config.workflow import Workflow
from crw.engine.steps import packet
from crw.settings import DEFAULT_SETTINGS, Settings
from crw.workspace.placer import Placer


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
    placer: Placer | None = None
    """Makes each call's P (None: a plain directory under the run, as without git)."""
    git_rows: executor_git.GitRows = field(default_factory=dict)
    """The run's prepared and crw_commit rows, which an executor's harvest reads
    (`crw.actors.executor_git`), kept as calls commit."""
    settings: Settings = DEFAULT_SETTINGS
    """The run's settings (the harvest's answer_max_bytes)."""
    inputs: Mapping[str, Any] = field(default_factory=dict)
    """What `{inputs.NAME}` stands for in the run's tasks."""

    @functools.cached_property
    def tools(self) -> RunTools:
        """What every call of the run takes from it, made at its first call."""
        return RunTools.of(self)


@dataclass(frozen=True)
class RunTools:
    """The run's tool entries as every call's thread and turn text carry them, and
    the paths its packets name: the same for each call of a run, so made once a
    run, not once a call (a 10,000-call run would make them 10,000 times)."""

    config: Mapping[str, str]
    """thread/start's and thread/resume's leaf config keys (never changed: shared)."""
    section: str | None
    """The Repository tools section every turn text ends with."""
    go_root: str | None
    run_json: str
    workflow_file: str
    calls: Path
    """`<run>/calls`, where a call's P is when no placer decides it."""

    @classmethod
    def of(cls, ctx: CallContext) -> RunTools:
        go_root = ctx.workflow.verifier.go_root if ctx.workflow.verifier else None
        run_json, workflow_file = str(ctx.run_dir / "run.json"), str(ctx.workflow.path)
        # The tool entries are taken from the call's run and journaled nowhere
        # (STEP-60): the config keys of every thread/start and thread/resume, and
        # the Repository tools section every turn text ends with.
        entries = packet.tool_entries(ctx.tmpdir, go_root)
        return cls(
            config=packet.shell_environment_config(entries, os.environ.get("PATH")),
            section=packet.tools_section(ctx.tmpdir, go_root, run_json, workflow_file),
            go_root=go_root,
            run_json=run_json,
            workflow_file=workflow_file,
            calls=ctx.run_dir / "calls",
        )
