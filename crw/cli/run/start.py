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
import functools
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from crw import codex_config
from crw.binding.owner import bind_owner, orchestrator_line
from crw.cli.default_db import chosen_db
from crw.cli.output import one_line
from crw.cli.run.preview import SessionStart, app_server_judged, session_judged
from crw.cli.run.start_report import StartOutcome, report_start
from crw.detach import Detached
from crw.engine.calls.review import check_fix_efforts
from crw.engine.config.evidence_cwd import check_evidence_cwd
from crw.engine.config.inputs import RunInput, fill_inputs, parse_pairs, refill_inputs
from crw.engine.config.repo import RunRepository, run_repository
from crw.engine.config.roles import RoleTable, load_roles
from crw.engine.config.workflow import Workflow, load_workflow
from crw.engine.owner.multi_agent import MultiAgent, run_protocol
from crw.engine.run.launch import launch_run_process
from crw.engine.run.locks import run_is_live, start_lock
from crw.engine.run.rerun import Reuse, write_reused
from crw.engine.run.run_inputs import write_inputs
from crw.engine.run.rundir import RunDir, loose_state, new_run_id, resolve_state
from crw.engine.run.runspec import (
    RerunOf,
    RunEnv,
    RunSpec,
    WorkflowRef,
    recorded_settings,
    write_run_spec,
)
from crw.engine.run.tmploc import dir_from
from crw.errors import InputError, RefusedError
from crw.host.uri import HostUri, parse_host_uri, session_host
from crw.journal.stores import journal_db_ready, read_run_journal
from crw.settings import MAX_FILE_BYTES_ENV, Settings, file_limit, max_file_bytes
from crw.workspace.names import node_ref


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
    inputs: list[str] | None = None,
    input_files: list[str] | None = None,
    wait: bool = False,
    timeout: float | None = None,
    db: str | None = None,
) -> int:
    if timeout is not None and not wait:
        raise InputError("--timeout is how long --wait waits: pass --wait too, or drop --timeout")
    outcome = start_run(
        Path(workflow),
        backend=backend,
        owner=owner,
        host=host,
        codex_bin=codex_bin,
        state=state,
        environ=os.environ,
        trace=trace,
        inputs=inputs or (),
        input_files=input_files or (),
        db=db,
    )
    return report_start(outcome, json=json, wait=wait, timeout=timeout)


@dataclass(frozen=True)
class StartPlan:
    """What every check of a start found, before anything is written: the run
    `start` records, and what `validate` (and `start --dry-run`) shows."""

    state_dir: Path
    workflow: Workflow
    recorded: Settings
    roles: RoleTable
    backend: str
    owner: str | None
    uri: HostUri
    pool: int
    codex_path: str | None
    tmpdir: str
    repository: RunRepository
    inputs: dict[str, RunInput]
    warnings: list[str]
    multi_agent: MultiAgent | None = None
    """A session run's multi-agent protocol (`crw.engine.owner.multi_agent`)."""


def check_start(
    workflow_path: Path,
    *,
    backend: str,
    owner: str | None,
    host: str | None,
    state: str | None,
    environ: os._Environ[str] | dict[str, str],
    codex_bin: str | None = None,
    trace: bool = False,
    inputs: Sequence[str] = (),
    input_files: Sequence[str] = (),
    source_inputs: Mapping[str, RunInput] | None = None,
) -> StartPlan:
    """Every check a start makes before the run exists (CMD-START-14), asking no host
    and writing nothing. `source_inputs`: a rerun's source inputs, which `inputs` and
    `input_files` override (`refill_inputs`).

    Raises:
        InputError: the workflow, its inputs, the role store, the owner, the host's
            URI, the codex binary, the TMPDIR or the repository is refused.
    """
    with file_limit(max_file_bytes(environ)):  # the caller's, which the run records
        return _check_start(
            workflow_path,
            backend=backend,
            owner=owner,
            host=host,
            state=state,
            environ=environ,
            codex_bin=codex_bin,
            trace=trace,
            inputs=inputs,
            input_files=input_files,
            source_inputs=source_inputs,
        )


def _check_start(
    workflow_path: Path,
    *,
    backend: str,
    owner: str | None,
    host: str | None,
    state: str | None,
    environ: os._Environ[str] | dict[str, str],
    codex_bin: str | None,
    trace: bool,
    inputs: Sequence[str],
    input_files: Sequence[str],
    source_inputs: Mapping[str, RunInput] | None,
) -> StartPlan:
    values = parse_pairs(inputs, "--input")
    files = parse_pairs(input_files, "--input-file")
    state_dir = resolve_state(state, environ, Path.cwd())
    workflow = load_workflow(workflow_path)
    declared, lines = workflow.inputs, workflow.input_lines
    if source_inputs is None:
        filled = fill_inputs(str(workflow_path), declared, lines, values, files, Path.cwd())
    else:
        filled = refill_inputs(
            str(workflow_path), declared, lines, source_inputs, values, files, Path.cwd()
        )
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
        config = codex_config.read_config(codex_config.codex_home(environ))
        protocol: MultiAgent | None = run_protocol(config, environ)
    else:
        uri = parse_host_uri(host or "codex")
        owner = protocol = None
    codex_path = _codex_found(codex_bin) if uri.kind == "codex" else None
    tmpdir = dir_from(environ)  # asked once, here; refuses before anything is written
    repository = run_repository(workflow.repo, workflow.head, state_dir, workflow.path)
    check_evidence_cwd(workflow, repository.path)
    return StartPlan(
        state_dir,
        workflow,
        recorded,
        roles,
        backend,
        owner,
        uri,
        pool,
        codex_path,
        tmpdir,
        repository,
        filled,
        loose_state(state_dir),
        protocol,
    )


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
    inputs: Sequence[str] = (),
    input_files: Sequence[str] = (),
    db: str | None = None,
    source_inputs: Mapping[str, RunInput] | None = None,
    reuse: Reuse | None = None,
) -> StartOutcome:
    """Refuse or record, bind and launch a run; see the module docstring. `trace`
    (`--trace`) records SessionConfig.Trace on, whatever `[settings]` says;
    `inputs` and `input_files` are the `NAME=VALUE` of `--input` and `--input-file`;
    `db` (`--db`, else $CRW_DB, else the state's default, `crw flow init --db`) the
    database that keeps the run's journal.
    A rerun (`crw flow rerun`) gives its source's inputs (`source_inputs`) and its `reuse`,
    whose rows the run's reused.json keeps before run.json names the source."""
    journal_db = chosen_db(db, resolve_state(state, environ, Path.cwd()), environ)
    if journal_db is not None:
        journal_db_ready(journal_db)  # before anything is made: a bad URL changes nothing
    plan = check_start(
        workflow_path,
        backend=backend,
        owner=owner,
        host=host,
        state=state,
        environ=environ,
        codex_bin=codex_bin,
        trace=trace,
        inputs=inputs,
        input_files=input_files,
        source_inputs=source_inputs,
    )
    state_dir, workflow, roles, pool = plan.state_dir, plan.workflow, plan.roles, plan.pool
    owner, uri, repository = plan.owner, plan.uri, plan.repository
    run_id = new_run_id(workflow.name, _dt.datetime.now(_dt.UTC))
    run = RunDir(state_dir / "flow" / run_id)
    run.create()
    recorded_inputs = write_inputs(run, plan.inputs)  # the copies before run.json names them
    if reuse is not None:  # its rows before run.json names the source
        reuse = reuse.for_run(functools.partial(node_ref, run_id))
        write_reused(run.reused, reuse)
    spec = RunSpec(
        id=run_id,
        workflow=WorkflowRef(path=str(workflow.path), digest=workflow.digest),
        backend=backend,
        pool=pool,
        repository=repository.path,
        head=repository.head,
        host=str(uri),
        owner=owner,
        env=RunEnv(TMPDIR=plan.tmpdir),
        max_file_bytes=_file_limit(environ),
        codex_bin=codex_bin,
        settings=recorded_settings(plan.recorded),
        inputs=recorded_inputs,
        journal_db=journal_db,
        rerun=RerunOf(run=reuse.source, node=reuse.start_from) if reuse is not None else None,
        multi_agent=plan.multi_agent,
    )
    settings = settings if settings is not None else workflow.settings
    outcome = StartOutcome(run=run, spec=spec, warnings=plan.warnings, reuse=reuse)
    outcome.warnings += _excluded(state_dir)
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
        with_host = app_server_judged(workflow, uri, plan.codex_path, spec.repository, spec.head)
    with start_lock(run) as lock:
        write_run_spec(run.run_json, spec)
        if owner is not None:
            outcome.warnings += _bind_owner(state_dir, owner, run_id, roles)
        child = launch_run_process(run, state_dir, spec.env_overrides(), environ, lock)
    # The child holds the start lock now, until it holds the run lock.
    outcome.pid = child.pid
    outcome.preview = with_host()  # asked while the process imports (it asks its host later)
    came = _await_started(run, child, settings.start_wait)
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


def _excluded(state_dir: Path) -> list[str]:
    """The state directory added to its checkout's info/exclude, so git shows no
    untracked `.crw/`; the warning when it cannot be."""
    from crw.workspace.exclude import exclude_state

    warning = exclude_state(state_dir)
    return [warning] if warning else []


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


def _await_started(run: RunDir, child: Detached, timeout: float) -> str:
    """Wait for the run process's started row: "started" once it is there, "exited"
    when the process exited without one, "coming_up" when the process still lives
    after `timeout` without one."""
    deadline = time.monotonic() + timeout
    while True:
        if _has_started(run):
            return "started"
        if child.poll() is not None:
            return "started" if _has_started(run) else "exited"
        if time.monotonic() >= deadline:
            return "coming_up"
        time.sleep(0.01)


def _has_started(run: RunDir) -> bool:
    return any(row.get("row") == "started" for row in read_run_journal(run.journal).rows)


def _file_limit(environ: Mapping[str, str]) -> int | None:
    """The limit `$CRW_MAX_FILE_BYTES` sets, as the run records it (None: not set)."""
    return max_file_bytes(environ) if environ.get(MAX_FILE_BYTES_ENV) else None
