"""`crw flow start WORKFLOW`: validate, record the run, bind the owner, launch.

The order is the spec's: every refusal (the workflow, the role store, the owner,
the host: a private codex host whose binary cannot be found included, the TMPDIR)
comes before the run directory or its spec exists, before any process starts and
before the owner is bound (CMD-START-14). The start takes
the run's start lock before it binds the owner and hands it to the run's process,
which holds it until it holds the run lock (BIND-LINE-19), however long it takes
to come up. The start then waits up to `Settings.start_wait` for the process's
started row and reports what is true: started; still coming up (the process lives
and holds the start lock: exit 0, with a warning); or did not start (the process
exited without a started row: exit 1).
"""

from __future__ import annotations

import datetime as _dt
import os
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from crw import codex_config
from crw.binding.owner import bind_owner, orchestrator_line
from crw.cli.output import emit, one_line
from crw.cli.run.preview import Preview, SessionStart, app_server_judged, session_judged
from crw.engine.calls.review import check_fix_efforts
from crw.engine.config.evidence_cwd import check_evidence_cwd
from crw.engine.config.repo import run_repository
from crw.engine.config.roles import RoleTable, load_roles
from crw.engine.config.workflow import load_workflow
from crw.engine.run.launch import launch_run_process
from crw.engine.run.locks import run_is_live, start_lock
from crw.engine.run.rundir import RunDir, loose_state, new_run_id, resolve_state
from crw.engine.run.runspec import RunEnv, RunSpec, WorkflowRef, recorded_settings, write_run_spec
from crw.engine.run.tmploc import dir_from
from crw.errors import InputError, RefusedError
from crw.host.uri import parse_host_uri, session_host
from crw.journal.log import read_journal
from crw.settings import Settings


@dataclass
class StartOutcome:
    run: RunDir
    spec: RunSpec
    pid: int | None = None
    started: bool = False
    warnings: list[str] = field(default_factory=list)
    preview: Preview = field(default_factory=Preview)


def start_command(
    workflow: str,
    *,
    backend: str,
    owner: str | None,
    host: str | None,
    codex_bin: str | None,
    state: str | None,
    json: bool,
    trace: bool = False,
) -> int:
    outcome = start_run(
        Path(workflow),
        backend=backend,
        owner=owner,
        host=host,
        codex_bin=codex_bin,
        state=state,
        environ=os.environ,
        trace=trace,
    )
    state = f"--state {outcome.run.root.parents[1]}"
    steps = None
    if outcome.spec.backend == "session":
        steps = f"crw flow next {outcome.spec.id} --wait 30 {state}"
    payload: dict[str, Any] = {
        "run": outcome.spec.id,
        "run_dir": str(outcome.run.root),
        "backend": outcome.spec.backend,
        "pool": outcome.spec.pool,
        "owner": outcome.spec.owner,
        "host": outcome.spec.host,
        "pid": outcome.pid,
        "started": outcome.started,
        "warnings": outcome.warnings,
        **outcome.preview.to_json(),
        "next": steps,
    }
    verb = "started" if outcome.started else "is starting"
    lines = [
        f"run {outcome.spec.id} {verb} ({outcome.spec.backend} backend, pool {outcome.spec.pool})"
    ]
    lines.append(f"  run directory: {outcome.run.root}")
    lines += outcome.preview.lines()
    lines += [f"  warning: {warning}" for warning in outcome.warnings]
    lines.append(f"  its process (pid {outcome.pid}) runs the calls on host {outcome.spec.host}")
    if steps is not None:
        lines.append(f"  take its steps with: {steps}")
    lines.append(f"  see it with: crw flow status {outcome.spec.id} {state}")
    emit(json, payload, "\n".join(lines))
    return 0


def start_run(
    workflow_path: Path,
    *,
    backend: str,
    owner: str | None,
    host: str | None,
    state: str | None,
    environ: os._Environ[str] | dict[str, str],
    codex_bin: str | None = None,
    settings: Settings | None = None,
    trace: bool = False,
) -> StartOutcome:
    """Refuse or record, bind and launch a run; see the module docstring. `trace`
    (`--trace`) records SessionConfig.Trace on, whatever `[settings]` says."""
    state_dir = resolve_state(state, environ, Path.cwd())
    workflow = load_workflow(workflow_path)
    recorded = replace(workflow.settings, trace=True) if trace else workflow.settings
    roles = load_roles(state_dir / "roles.toml")
    check_fix_efforts(workflow, roles, state_dir / "roles.toml")
    pool = workflow.pool
    if backend == "session":
        # No owner is the owner_bound fact's warning, never a refusal (FACTS-1, -2).
        owner = owner or environ.get("CRW_OWNER_THREAD") or environ.get("CODEX_THREAD_ID") or None
        if owner is not None and one_line(owner) != owner:
            raise InputError(
                f"the owner thread {one_line(owner)} (from --owner, $CRW_OWNER_THREAD or "
                "$CODEX_THREAD_ID) holds a control character; pass the thread id as codex shows it"
            )
        uri = session_host(host, environ)
        pool = codex_config.session_pool(pool, environ)
    else:
        uri = parse_host_uri(host or "codex")
        owner = None
    codex_path = _codex_found(codex_bin) if uri.kind == "codex" else None
    tmpdir = dir_from(environ)  # asked once, here; refuses before anything is written
    repository = run_repository(workflow.repo, workflow.head, state_dir, workflow.path)
    check_evidence_cwd(workflow, repository.path)

    run_id = new_run_id(workflow.name, _dt.datetime.now(_dt.UTC))
    run = RunDir(state_dir / "flow" / run_id)
    loose = loose_state(state_dir)  # as the user left them, before the run makes any
    run.create()
    spec = RunSpec(
        id=run_id,
        workflow=WorkflowRef(path=str(workflow.path), digest=workflow.digest),
        backend=backend,
        pool=pool,
        repository=repository.path,
        head=repository.head,
        host=str(uri),
        owner=owner,
        env=RunEnv(TMPDIR=tmpdir),
        codex_bin=codex_bin,
        settings=recorded_settings(recorded),
    )
    settings = settings if settings is not None else workflow.settings
    outcome = StartOutcome(run=run, spec=spec, warnings=loose)
    if backend == "session":
        start = SessionStart(
            state_dir,
            run,
            owner,
            uri,
            roles,
            workflow,
            pool,
            spec.repository,
            environ,
            spec.head,
        )
        with_host = session_judged(start)  # the owner's binding as it is before the bind
    else:
        with_host = app_server_judged(workflow, uri, codex_path, spec.repository, spec.head)
    with start_lock(run) as lock:
        write_run_spec(run.run_json, spec)
        if owner is not None:
            outcome.warnings += _bind_owner(state_dir, owner, run_id, roles)
        child = launch_run_process(run, state_dir, spec.env_overrides(), environ, lock)
    # The child holds the start lock now, until it holds the run lock.
    outcome.pid = child.pid
    outcome.preview = with_host()  # asked while the process imports (it asks its host later)
    came = _await_started(run, child.pid, settings.start_wait)
    if came == "exited":
        raise RefusedError(
            f"run {run_id} did not start: its process (pid {child.pid}) exited without "
            f"a started row; see {run.log}, then resume it with: crw flow resume {run_id} --detach"
        )
    outcome.started = came == "started"
    if not outcome.started:
        outcome.warnings.append(
            f"its process (pid {child.pid}) is still coming up after "
            f"{settings.start_wait:g} s; it holds the start lock until it holds the run: "
            f"follow it with crw flow next {run_id}"
        )
    return outcome


def _codex_found(codex_bin: str | None) -> str:
    """The binary of the private `codex` host a run would start: a start that finds
    none is refused before the run exists, since nothing would ever start its host."""
    from crw.host.connect import found_codex_binary
    from crw.host.errors import HostUnavailable

    try:
        return found_codex_binary(codex_bin)
    except HostUnavailable as err:
        raise InputError(f"the host codex cannot be started: {err}") from err


def _bind_owner(state_dir: Path, owner: str, run_id: str, roles: RoleTable) -> list[str]:
    """Bind the owner before any process of the run exists (BIND-LINE-9), by the
    orchestrator line of the role table the start read: its process writes it again
    with the table its started row pins, when that is another."""
    line = orchestrator_line(run_id, roles.role_pairs(), roles.policy_digest())
    result = bind_owner(
        state_dir, owner, line, lambda other: run_is_live(RunDir(state_dir / "flow" / other))
    )
    return [result.warning] if result.warning else []


def _await_started(run: RunDir, pid: int, timeout: float) -> str:
    """Wait for the run process's started row: "started" once it is there, "exited"
    when the process exited without one, "coming_up" when the process still lives
    after `timeout` without one."""
    deadline = time.monotonic() + timeout
    while True:
        if _has_started(run):
            return "started"
        finished, _status = os.waitpid(pid, os.WNOHANG)
        if finished:
            return "started" if _has_started(run) else "exited"
        if time.monotonic() >= deadline:
            return "coming_up"
        time.sleep(0.01)


def _has_started(run: RunDir) -> bool:
    return any(row.get("row") == "started" for row in read_journal(run.journal).rows)
