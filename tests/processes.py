"""The processes a test started, found by the directory their command lines name."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


def processes_under(where: Path) -> list[int]:
    """The pids of the processes whose command line names `where` (a run's state
    directory, a host's socket under it), this one left out."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            with contextlib.suppress(OSError):
                if str(where).encode() in (entry / "cmdline").read_bytes():
                    pids.append(int(entry.name))
    return pids
