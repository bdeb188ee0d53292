"""The run process (`crw flow _run RUN`): holds the run and owns its nursery.

It puts the env its spec records into its own environment before it takes a lock,
takes its process lock before the run lock (BIND-LINE-15), opens the journal
writer and commits its started row (backend, process, pid, role_pairs,
policy_digest). On the app-server backend it then connects to the run's host and
runs the workflow's calls (`app_server_run`). The session backend's calls come
with the session-call issue; until then its process stops after its started row
and says so in the run's log.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import trio

from crw.actors.app_server_call import CallContext
from crw.actors.app_server_run import run_app_server_calls
from crw.actors.host_reader import open_host_reader
from crw.actors.journal_writer import open_journal_writer
from crw.clock import WallClock, system_clock
from crw.engine.locks import hold_run
from crw.engine.roles import load_roles
from crw.engine.rundir import RunDir, find_run, resolve_state
from crw.engine.runspec import RunSpec, read_run_spec
from crw.engine.tmploc import TmpLocError, dir_from
from crw.engine.workflow import load_workflow
from crw.errors import InputError
from crw.host.connect import connect_host
from crw.host.transport import HostUnavailable
from crw.host.uri import parse_host_uri
from crw.journal.log import read_journal
from crw.journal.replay import replay
from crw.journal.rows import Paused, Started
from crw.settings import DEFAULT_SETTINGS, Settings

log = logging.getLogger("crw.run")


def run_command(run: str, *, state: str | None) -> int:
    """Entry point of `crw flow _run`: exit 0 when the process ran its course."""
    state_dir = resolve_state(state, os.environ, Path.cwd())
    run_dir = find_run(state_dir, run)
    spec = read_run_spec(run_dir.run_json)
    _apply_recorded_env(spec)
    trio.run(run_process, run_dir, spec, state_dir)
    return 0


def _apply_recorded_env(spec: RunSpec) -> None:
    """Put the recorded env in place; a recorded TMPDIR that is no longer usable
    refuses the process (exit 2, naming the directory) before any lock or row."""
    overrides = spec.env_overrides()
    if not overrides:
        return
    try:
        dir_from(overrides)
    except TmpLocError as err:
        raise InputError(f"run {spec.id}: the recorded {err}") from err
    os.environ.update(overrides)


async def run_process(
    run_dir: RunDir,
    spec: RunSpec,
    state_dir: Path,
    *,
    clock: WallClock = system_clock,
    settings: Settings = DEFAULT_SETTINGS,
) -> str:
    """Hold the run, record this process's started row, and run what can be run.

    Returns the run's state as the process leaves it.
    """
    roles = load_roles(state_dir / "roles.toml")
    workflow = load_workflow(Path(spec.workflow.path)) if spec.backend == "app-server" else None
    if workflow is not None and workflow.digest != spec.workflow.digest:
        raise InputError(
            f"run {spec.id}: the workflow {spec.workflow.path} changed since the run "
            "started; restore the file the run started with"
        )
    with hold_run(run_dir) as process_lock:
        async with open_journal_writer(run_dir.journal, clock=clock) as journal:
            await journal.commit(
                [
                    Started(
                        backend=spec.backend,
                        process=process_lock.token if process_lock else None,
                        pid=os.getpid(),
                        role_pairs=roles.role_pairs(),
                        policy_digest=roles.policy_digest(),
                    )
                ]
            )
            if workflow is None:
                log.warning(
                    "run %s: the session backend cannot run calls yet; the process stops "
                    "after its started row",
                    spec.id,
                )
                return "running"
            replayed = replay(read_journal(run_dir.journal).rows)
            try:
                async with (
                    connect_host(
                        parse_host_uri(spec.host or "codex"),
                        codex_bin=spec.codex_bin,
                        stderr=run_dir.root / "host.log",
                    ) as client,
                    open_host_reader(client, settings) as reader,
                ):
                    ctx = CallContext(
                        journal=journal,
                        reader=reader,
                        workflow=workflow,
                        run_dir=run_dir.root,
                        tmpdir=spec.env.TMPDIR if spec.env else None,
                        pairs=roles.roles,
                    )
                    return await run_app_server_calls(ctx, spec.pool, replayed)
            except HostUnavailable as err:
                await journal.commit([Paused(reason="host_unavailable", error=str(err))])
                log.warning("run %s paused: %s", spec.id, err)
                return "paused"
