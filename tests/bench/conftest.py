"""The benches' tests: a directory for a bench's state, and what still runs under it."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest


def processes_under(where: Path) -> list[int]:
    """The pids of the processes whose command line names `where` (the host's
    socket and the run's state directory are under it)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            with contextlib.suppress(OSError):
                if str(where).encode() in (entry / "cmdline").read_bytes():
                    pids.append(int(entry.name))
    return pids


@pytest.fixture
def where(tmp_path: Path) -> Iterator[Path]:
    """A directory for the bench's state; whatever still runs under it at teardown
    is killed by pid."""
    yield tmp_path
    for pid in processes_under(tmp_path):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
