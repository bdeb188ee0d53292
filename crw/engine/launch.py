"""The detached launch of a run's process (`crw flow _run RUN`).

Every detached launch gives the process the caller's environment with the
variables the run spec records in place (env, today TMPDIR; exactly one entry
each), so a run relaunched from another shell runs below the TMPDIR its start
recorded. The child is a session leader with no terminal, its stdin closed and its
output appended to the run's log, so it outlives the command that started it and
never writes to that command's stdout.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from crw.engine.rundir import RunDir


def launch_env(environ: Mapping[str, str], overrides: Mapping[str, str]) -> dict[str, str]:
    """The caller's environment with the recorded variables in place."""
    env = {key: value for key, value in environ.items() if key not in overrides}
    env.update(overrides)
    return env


def launch_run_process(
    run: RunDir, state: Path, overrides: Mapping[str, str], environ: Mapping[str, str]
) -> subprocess.Popen[bytes]:
    """Start `crw flow _run` for `run`, detached; returns the child (its pid)."""
    argv = [sys.executable, "-m", "crw", "flow", "_run", run.root.name, "--state", str(state)]
    with open(run.log, "ab") as log:
        return subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=launch_env(environ, overrides),
            cwd=os.getcwd(),
            start_new_session=True,
            close_fds=True,
        )
