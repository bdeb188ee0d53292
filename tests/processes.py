"""The processes a test started, found by the directory their command lines name.

`processes_under` reads command lines only (a run's state directory, a host's
socket under it). `processes_naming` also reads each process's working
directory and environment: every process a test starts inherits its `TMPDIR`
(tests/cli/conftest.py `Crw`), so a process whose command line names nothing of
the test's (a detached run process a command launched after its parent was
killed) is still found by the directory its environment names.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import time
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


def _ancestors() -> set[int]:
    """This process and the processes it descends from (a controller whose command
    line names the base temporary directory, `--basetemp DIR`)."""
    pids, pid = set(), os.getpid()
    while pid > 1 and pid not in pids:
        pids.add(pid)
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            break
        pid = int(stat.rsplit(")", 1)[1].split()[1])
    return pids


def _cmdline(proc: Path) -> bytes:
    """The command line of `proc`; empty for a zombie and a kernel thread. A process
    in the middle of its exec reads empty too, for a moment: it is read again."""
    for _ in range(200):
        if cmdline := (proc / "cmdline").read_bytes():
            return cmdline
        state, ppid = (proc / "stat").read_text().rsplit(")", 1)[1].split()[:2]
        if state in "ZX" or ppid in ("0", "2"):
            return b""
        time.sleep(0.001)
    return b""


def processes_naming(where: Path) -> dict[int, str]:
    """The processes whose command line, working directory or environment names
    `where` or a path under it (not a sibling that merely starts alike), each with
    its command line; this process and its ancestors left out, and zombies."""
    named = re.compile(re.escape(os.fsencode(where)) + rb"(?=[/\0]|$)")
    mine = _ancestors()
    found: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in mine:
            continue
        with contextlib.suppress(OSError):
            cmdline = _cmdline(entry)
            if not cmdline:
                continue
            cwd = os.fsencode(os.readlink(entry / "cwd")) + b"\0"
            if (
                named.search(cmdline)
                or named.search(cwd)
                or named.search((entry / "environ").read_bytes())
            ):
                found[int(entry.name)] = os.fsdecode(cmdline.rstrip(b"\0").replace(b"\0", b" "))
    return found


def reap_naming(where: Path, timeout: float = 10.0) -> dict[int, str]:
    """SIGKILL every process `processes_naming(where)` finds, again and again until
    none is left: a process killed mid-way may have started another (a command that
    launched a detached run process), which the next round finds. The processes
    killed, with their command lines."""
    killed: dict[int, str] = {}
    deadline = time.monotonic() + timeout
    while found := processes_naming(where):
        killed |= found
        for pid in found:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if time.monotonic() > deadline:
            break
        time.sleep(0.01)
    return killed
