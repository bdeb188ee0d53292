"""`crw flow resume RUN [--detach]`: go on with a run from its journal.

The run goes on with the backend its started row records; a spec that names
another backend than the started row is a mixed resume, refused as an input
error before any row is written (GEN-12). A run a process holds, or one that
ended, is refused (exit 1), and so is one another command is launching a process
for (its launch lock is held). In the foreground the command is the run process
itself; with --detach it launches `crw flow _run` as `start` does, with the env
the spec records in place, under the run's launch lock, which the process holds
until it holds the run lock: one launch at a time. It then waits up to the run's
start_wait for the process's started row: a process that stopped before it (its
workflow changed since the run started) is reported with its line, exit 1. A
recorded TMPDIR that is missing, not a directory or not writable refuses either
before anything changes: --detach exits 1 naming it, the foreground (the run
process) exits 2. A run whose journal is in a database is refused while another
machine's writer holds its lease; one this state directory has no directory of is
made from the database once that lease lapsed (`crw.cli.run.resume_here`).
"""

from __future__ import annotations

import gc
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from crw.cli.output import emit
from crw.cli.run.resume_here import check_lease
from crw.cli.shell import shell_word
from crw.engine.run.launch_record import LaunchFailure
from crw.engine.run.locks import (
    RunHeldError,
    holder_pid,
    is_launching,
    launch_lock_path,
    run_is_live,
)
from crw.engine.run.rundir import RunDir, find_run, resolve_state
from crw.engine.run.runspec import RunSpec, check_backend, read_run_spec
from crw.errors import InputError, RefusedError
from crw.journal.replay import replay
from crw.journal.stores import check_db_url, read_run_journal

if TYPE_CHECKING:
    from crw.engine.run.launch import Launch


def check_resumable(run_dir: RunDir, spec: RunSpec, state: str | None = None) -> None:
    """Refuse a resume that must not happen, before anything of the run changes
    (`state`: the `--state` the command was given, for the commands it names)."""
    run = replay(read_run_journal(run_dir.journal).rows)
    check_backend(run, spec)
    check_lease(spec)
    if run_is_live(run_dir):
        pid = holder_pid(run_dir.run_lock)
        raise RunHeldError(
            f"run {spec.id} is held by a live process{f' (pid {pid})' if pid else ''}; "
            f"follow it with: crw flow status {spec.id}"
        )
    if run.state == "ended":
        more = f" --state {shell_word(state)}" if state else ""
        raise RefusedError(
            f"run {spec.id} ended ({run.ended_status}) and resumes no more; see its outcome "
            f"with crw flow result {spec.id}{more}, or run it again from a node with "
            f"crw flow rerun {spec.id} --from NODE{more}"
        )


def not_resumed(run_id: str, failure: LaunchFailure) -> str:
    """The line of a resume whose process stopped before its started row."""
    return (
        f"run {run_id} was not resumed: its process (pid {failure.pid}) stopped before it "
        f"started: {failure.reason}; then resume it with: crw flow resume {run_id} --detach"
    )


def launch_resume(
    run_dir: RunDir, state_dir: Path, spec: RunSpec, check: Callable[[], None]
) -> tuple[Launch, Literal["started", "coming_up"]]:
    """Launch the run's process detached under its launch lock (`check` refuses a
    launch that must not happen), and wait up to start_wait for its started row.

    Raises:
        RefusedError: the process stopped before its started row (recorded for
            `status`), or what `check` or the launch raise.
    """
    from crw.engine.run.launch import launch_once

    launch = launch_once(run_dir, state_dir, spec.env_overrides(), os.environ, check)
    came = launch.settle(spec.run_settings().start_wait)
    if isinstance(came, LaunchFailure):
        raise RefusedError(not_resumed(spec.id, came))
    return launch, came


def run_and_wait(run: str, *, state: str | None) -> int:
    """`crw flow _run RUN`: the run process; then, when it paused the run
    host_unavailable, its wait for the host and the resume when the host answers
    (`crw.actors.host_back`), as `crw flow resume RUN --detach` resumes it."""
    from crw.actors.run import run_command

    code = run_command(run, state=state)
    # The collector stays off for what follows (the process ends after it), as for
    # the start-up; a wait that is made turns it on (`wait_then_go_on`).
    gc.disable()
    _wait_for_host(run, state)
    return code


def _wait_for_host(run: str, state: str | None) -> None:
    from crw.actors.host_back import journal_size, wait_then_go_on

    state_dir = resolve_state(state, os.environ, Path.cwd())
    run_dir = find_run(state_dir, run)
    spec = read_run_spec(run_dir.run_json)

    def go_on(end: int) -> int:
        def check() -> None:
            if journal_size(run_dir.journal) != end:
                raise RefusedError(f"run {spec.id} went on meanwhile (its journal moved on)")
            check_resumable(run_dir, spec)

        return launch_resume(run_dir, state_dir, spec, check)[0].pid

    wait_then_go_on(run_dir, spec, go_on)


def _find_or_fetch(state_dir: Path, run: str, db: str | None) -> RunDir:
    """The run's directory under `state_dir`; else, for a run the database (`db`,
    else $CRW_DB, else the state's default) keeps and this machine has no directory
    of, the directory made from the database (`crw.cli.run.resume_here`).

    Raises:
        InputError: no such run here nor in the database.
    """
    try:
        return find_run(state_dir, run)
    except InputError:
        from crw.cli.default_db import chosen_db

        url = chosen_db(db, state_dir, os.environ)
        if url is None or os.sep in run:
            raise
        check_db_url(url)
        from crw.cli.run.resume_here import run_from_database

        made = run_from_database(state_dir, run, url)
        if made is None:
            raise
        return made


def resume_command(
    run: str, *, detach: bool, state: str | None, json: bool, db: str | None = None
) -> int:
    state_dir = resolve_state(state, os.environ, Path.cwd())
    run_dir = _find_or_fetch(state_dir, run, db)
    spec = read_run_spec(run_dir.run_json)
    check_resumable(run_dir, spec, state)
    if is_launching(run_dir):
        pid = holder_pid(launch_lock_path(run_dir))
        raise RefusedError(
            f"run {spec.id} is being launched by another command"
            f"{f' (process {pid})' if pid else ''}; follow it with: crw flow next {spec.id}"
        )
    payload: dict[str, Any] = {"run": spec.id, "run_dir": str(run_dir.root), "detached": detach}
    if detach:
        launch, came = launch_resume(
            run_dir, state_dir, spec, lambda: check_resumable(run_dir, spec)
        )
        payload["pid"] = launch.pid
        said = f"run {spec.id} resumed in process {launch.pid}"
        if came == "coming_up":
            said += f"; it is still coming up: follow it with crw flow next {spec.id}"
        payload["started"] = came == "started"
        emit(json, payload, said)
        return 0
    from crw.actors.run import run_command

    run_command(spec.id, state=str(state_dir))
    after = replay(read_run_journal(run_dir.journal).rows)
    payload |= {"state": after.state, "ended_status": after.ended_status}
    emit(json, payload, f"run {spec.id}: {after.state}")
    return 0
