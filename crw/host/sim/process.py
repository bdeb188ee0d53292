"""The simulated host as a child process (`crw host sim serve`), for the demo,
the benchmarks and the tests that need a real shared host on a unix socket."""

from __future__ import annotations

import os
import signal
import socket as socket_module
import subprocess
import time
from pathlib import Path

from crw import detach
from crw.detach import Detached
from crw.errors import RefusedError
from crw.private import open_file

START_TIMEOUT = 15.0


def launch_sim(
    socket: Path, codex_home: Path, log: Path | None = None, models: tuple[str, ...] | None = None
) -> Detached:
    """Start `crw host sim serve` on `socket` and wait until it listens; `models`,
    its catalog (`--models`: it refuses spawns as codex does), else none.

    Its output goes to `log` (else nowhere), never to the caller's stdout; it is a
    session leader, so a terminal's signals do not reach it. Stop it with `stop_sim`.

    Raises:
        RefusedError: it exited, or did not listen within START_TIMEOUT.
    """
    args = ["host", "sim", "serve", "--socket", str(socket), "--codex-home", str(codex_home)]
    args += ["--models", ",".join(models)] if models is not None else []
    out = open_file(log, os.O_WRONLY | os.O_APPEND) if log else None
    try:
        host = detach.start_crw(args, out=out)
    finally:
        if out is not None:
            os.close(out)
    deadline = time.monotonic() + START_TIMEOUT
    while not _listens(socket):
        if host.poll() is not None or time.monotonic() > deadline:
            stop_sim(host)
            where = f"; see {log}" if log else ""
            raise RefusedError(f"the simulated host did not start on {socket}{where}")
        time.sleep(0.02)
    return host


def _listens(path: Path) -> bool:
    """Whether a connection to the unix socket `path` is accepted: the file exists
    a moment before the server listens on it (bind, then listen)."""
    probe = socket_module.socket(socket_module.AF_UNIX, socket_module.SOCK_STREAM)
    try:
        probe.connect(str(path))
    except OSError:
        return False
    finally:
        probe.close()
    return True


def stop_sim(host: Detached) -> None:
    """SIGTERM, then SIGKILL if it lingers; always reaped."""
    if host.poll() is None:
        host.send_signal(signal.SIGTERM)
    try:
        host.wait(timeout=10)
    except subprocess.TimeoutExpired:
        host.kill()
        host.wait()
