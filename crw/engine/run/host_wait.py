"""The wait of a run process for its host, once it paused the run host_unavailable.

A run process whose host went away commits its `paused` row (host_unavailable),
lets the run go (its process and run locks, as any process that stops) and then,
for the run's `host_wait`, waits for the host to answer again
(`crw.actors.host_back`); when it does, the run goes on as `crw flow resume`
goes on with it. The waiting process holds `host_wait.lock` in the run
directory, its pid and until when it waits written in it as JSON, so that
`crw flow status` can say that the run goes on by itself, and `pause`, `cancel`
and `rm` can tell it to stop (SIGTERM, `stop_waiter`). The lock file stays when
the wait ends (as run.lock does): only a held one is a wait.

The waiter writes no row. It stops without one when anything was appended to the
journal after its paused row (a resume's started row, a cancel's ended row, an
answer's decision): the run went on without it.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import signal
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from crw.engine.run.locks import is_held
from crw.engine.run.rundir import RunDir
from crw.errors import CrwError
from crw.private import open_file

FIRST_PROBE = 1.0
"""Seconds from the pause to the first probe of the host; each later interval doubles."""
_POLL = 0.05


def wait_lock_path(run: RunDir) -> Path:
    return run.root / "host_wait.lock"


@dataclass(frozen=True)
class Waiting:
    """A process that waits for the run's host: its pid, until when (ISO 8601, UTC)."""

    pid: int
    until: str

    def to_json(self) -> dict[str, Any]:
        return {"pid": self.pid, "until": self.until}


def paused_here(rows: Sequence[dict[str, Any]], pid: int) -> int | None:
    """The seq of the journal's last row when it is the paused host_unavailable row
    of the process `pid` (its newest started row names `pid`); else None: this
    process has no wait to make (another paused the run, or went on with it)."""
    if not rows:
        return None
    last = rows[-1]
    if last.get("row") != "paused" or last.get("reason") != "host_unavailable":
        return None
    started = next((row for row in reversed(rows) if row.get("row") == "started"), None)
    if started is None or started.get("pid") != pid:
        return None
    seq = last.get("seq")
    return seq if isinstance(seq, int) else None


def next_interval(interval: float, cap: float) -> float:
    """The interval after `interval` between two probes: doubled, at most `cap`."""
    return min(interval * 2, cap)


class WaitLock:
    """The held `host_wait.lock` of a waiting process; `release` lets it go."""

    def __init__(self, fd: int) -> None:
        self._fd: int | None = fd

    def release(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)  # the flock goes with the descriptor


def take_wait_lock(run: RunDir, waiting: Waiting, timeout: float) -> WaitLock | None:
    """Hold `host_wait.lock` and write `waiting` into it; None when another waiter
    still holds it after `timeout` seconds (an earlier process of the run whose
    wait the run went on from, about to notice and stop)."""
    fd = open_file(wait_lock_path(run), os.O_RDWR | os.O_NOFOLLOW)
    deadline = time.monotonic() + timeout
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() >= deadline:
                os.close(fd)
                return None
            time.sleep(_POLL)
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps(waiting.to_json()).encode(), 0)
    return WaitLock(fd)


def waiting(run: RunDir) -> Waiting | None:
    """The process that waits for the run's host, if one does (its lock is held)."""
    path = wait_lock_path(run)
    try:
        if not is_held(path):
            return None
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, CrwError):  # a lock file that cannot be read: none shown
        return None
    if not isinstance(record, dict):
        return None
    pid, until = record.get("pid"), record.get("until")
    if not isinstance(pid, int) or not isinstance(until, str):
        return None
    return Waiting(pid, until)


def stop_waiter(run: RunDir, timeout: float = 10.0) -> Waiting | None:
    """Tell the process that waits for the run's host to stop (SIGTERM), and wait
    up to `timeout` seconds for it to let its lock go; the wait told, or None."""
    waiter = waiting(run)
    if waiter is None:
        return None
    try:
        os.kill(waiter.pid, signal.SIGTERM)
    except OSError as err:
        if err.errno != errno.ESRCH:
            raise
        return waiter
    deadline = time.monotonic() + timeout
    with contextlib.suppress(CrwError):
        while is_held(wait_lock_path(run)) and time.monotonic() < deadline:
            time.sleep(_POLL)
    return waiter


@contextlib.contextmanager
def held(lock: WaitLock) -> Iterator[WaitLock]:
    try:
        yield lock
    finally:
        lock.release()
