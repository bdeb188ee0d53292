"""The detached launch of a run's process (`crw flow _run RUN`).

Every detached launch gives the process the caller's environment with the
variables the run spec records in place (env, today TMPDIR; exactly one entry
each), so a run relaunched from another shell runs below the TMPDIR its start
recorded. The child is a session leader with no terminal, its stdin closed and its
output appended to the run's log, so it outlives the command that started it and
never writes to that command's stdout.

A launch hands the child the lock it launched under (the start's start lock, a
resume's launch lock, `crw.engine.locks`): the child holds it until it holds the
run lock, so no second launch of the run starts meanwhile, however long the child
takes to come up or whenever the launcher exits.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

from crw.engine.locks import HandedLock, handed_env, launch_lock
from crw.engine.rundir import RunDir
from crw.engine.tmploc import recorded_problem
from crw.errors import RefusedError
from crw.private import open_file


def launch_env(environ: Mapping[str, str], overrides: Mapping[str, str]) -> dict[str, str]:
    """The caller's environment with the recorded variables in place."""
    env = {key: value for key, value in environ.items() if key not in overrides}
    env.update(overrides)
    return env


def launch_run_process(
    run: RunDir,
    state: Path,
    overrides: Mapping[str, str],
    environ: Mapping[str, str],
    handed: HandedLock,
) -> subprocess.Popen[bytes]:
    """Start `crw flow _run` for `run`, detached, handing it `handed`; returns the
    child (its pid). The caller then closes its own descriptor of `handed`."""
    argv = [sys.executable, "-m", "crw", "flow", "_run", run.root.name, "--state", str(state)]
    with os.fdopen(open_file(run.log, os.O_WRONLY | os.O_APPEND), "ab") as log:  # 0600 if gone
        child = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=launch_env(environ, overrides) | handed_env([handed]),
            cwd=os.getcwd(),
            start_new_session=True,
            close_fds=True,
            pass_fds=(handed.fd,),
        )
    handed.name_holder(child.pid)
    return child


def launch_once(
    run: RunDir,
    state: Path,
    overrides: Mapping[str, str],
    environ: Mapping[str, str],
    check: Callable[[], None],
) -> subprocess.Popen[bytes]:
    """Launch the run's process under the run's launch lock: at most one launch at a
    time. `check` refuses a launch that must not happen (a run a process holds, one
    that ended); it runs under the lock, so it sees what a launch that raced this one
    left: its process holds the run lock before it lets the launch lock go.

    A recorded env that cannot be put in place (its TMPDIR missing, not a directory
    or not writable) refuses the launch before the lock or anything else of the run.

    Raises:
        RefusedError: the recorded TMPDIR is unusable (the reason names it).
        RunHeldError: another command is launching the run's process.
        CrwError: what `check` raises.
    """
    problem = recorded_problem(overrides)
    if problem is not None:
        raise RefusedError(
            f"run {run.id}'s process cannot be launched: {problem}, then resume the run"
        )
    with launch_lock(run) as lock:
        check()
        return launch_run_process(run, state, overrides, environ, lock)
