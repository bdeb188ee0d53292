"""The run process (`crw flow _run RUN`): holds the run and owns its nursery.

It puts the env its spec records into its own environment before it takes a lock,
takes its process lock before the run lock (BIND-LINE-15), opens the journal
writer and commits its started row (backend, process, pid, role_pairs,
policy_digest). The backends that run calls come with the host and session-call
issues; until then the process stops after its started row and says so in the
run's log.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import trio

from crw.actors.journal_writer import open_journal_writer
from crw.clock import WallClock, system_clock
from crw.engine.locks import hold_run
from crw.engine.roles import load_roles
from crw.engine.rundir import RunDir, find_run, resolve_state
from crw.engine.runspec import RunSpec, read_run_spec
from crw.engine.tmploc import TmpLocError, dir_from
from crw.errors import InputError
from crw.journal.rows import Started

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
    run_dir: RunDir, spec: RunSpec, state_dir: Path, *, clock: WallClock = system_clock
) -> None:
    """Hold the run, record this process's started row, and run what can be run."""
    roles = load_roles(state_dir / "roles.toml")
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
            log.warning(
                "run %s: no backend can run calls yet (%s); the process stops after "
                "its started row",
                spec.id,
                spec.backend,
            )
