"""A crw process started detached from the process that starts it.

A run's process (`crw flow _run`, crw.engine.run.launch) and the simulated host
(`crw host sim serve`, crw.host.sim.process) are `python -m crw ARGS` processes
that outlive the command that starts them. `start_crw` starts one: a session
leader (no terminal's signal reaches it), its stdin /dev/null, its stdout and
stderr one descriptor, no descriptor of the starter's but those handed to it.

Both starters call it as `detach.start_crw`, looked up when they start: the one
place a crw process is started so, which the test suite replaces with a start
that forks the same process from a server that imported crw once
(tests/zygote.py); the process, its pid, environment and descriptors are the same.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping, Sequence
from typing import Protocol


class Detached(Protocol):
    """What a starter does with the process it started (`subprocess.Popen` does it)."""

    pid: int

    def poll(self) -> int | None:
        """Its exit status once it exited (-N: signal N ended it), else None."""

    def wait(self, timeout: float | None = None) -> int:
        """Its exit status, once it exits (`subprocess.TimeoutExpired` after `timeout`)."""

    def send_signal(self, sig: int) -> None:
        """Signal it, unless it exited."""

    def kill(self) -> None:
        """SIGKILL it, unless it exited."""


def start_crw(
    args: Sequence[str],
    *,
    out: int | None,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    pass_fds: Sequence[int] = (),
) -> Detached:
    """Start `python -m crw *args` detached: its stdout and stderr on the descriptor
    `out` (None: /dev/null), in `env` and `cwd` (None: this process's), holding
    `pass_fds` at their numbers here."""
    return subprocess.Popen(
        [sys.executable, "-m", "crw", *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL if out is None else out,
        stderr=subprocess.STDOUT,
        env=env,
        cwd=cwd,
        start_new_session=True,
        close_fds=True,
        pass_fds=tuple(pass_fds),
    )
