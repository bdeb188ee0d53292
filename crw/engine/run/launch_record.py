"""The record of a launch whose process stopped before its started row.

A detached launch (`crw.engine.run.launch`) waits for its process's started row; a
process that exits without one (its workflow changed since the run started, its
role store refuses a fix effort, its journal cannot be written, it crashed on the
way up) leaves the run with no process and no row that says why. The command that
launched it writes what the process said, with its pid, to `launch-failed.json`
in the run's directory, so `status` and `next` can say it while no process holds
the run. It is no row of the journal (only the run's process and the commands the
spec names write those), and the next process that records its started row
removes it. A process that stopped on an error after its started row, where no
row records why (a defect, a ref lock it cannot take), keeps the same record
itself (`started`), so it is told and held as a launch that stopped before it.

The record of a process that exited by itself (not killed by a signal) also
keeps the stamps of the files such a process reads or writes before its started
row is durable (`launch_files`), as its exit left them: `next`
launches no process for the run again while they are unchanged (`holds_launch`),
so a fault the user must fix (a journal that cannot be written: `chattr +i`, a
full disk) is launched at once per change, not once per `next`. An explicit
`resume` or `answer` launches whatever the record says.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from crw.engine.run.rundir import RunDir
from crw.private import write_atomic

Stamps = Mapping[str, tuple[int, ...]]
"""Each file's stamp by its path (`stamp`)."""


@dataclass(frozen=True)
class LaunchFailure:
    """A launched process that stopped before its started row: its `pid`, the
    line it gave (`reason`: what and how to fix it), when it was seen (`at`) and
    the stamps of the run's launch files as it left them (`files`; None in a
    record that has none). `started`: the process recorded its started row, then
    stopped on an error no row records (it keeps the record itself:
    `crw.actors.run`)."""

    pid: int
    reason: str
    at: str
    files: Stamps | None = field(default=None, compare=False)
    started: bool = False

    def to_json(self) -> dict[str, object]:
        """What `status` shows: pid, reason, at, started."""
        return {"pid": self.pid, "reason": self.reason, "at": self.at, "started": self.started}

    def told(self) -> str:
        """The reason as `next` tells it: a process that stopped after its started
        row is named."""
        if self.started:
            return f"its process {self.pid} stopped after its started row: {self.reason}"
        return self.reason


def launch_files(run: RunDir, state: Path) -> list[Path]:
    """The files a run process reads or writes before its started row is durable:
    run.json, the workflow file it names, the role store, the journal; and the run
    directory, where it takes its locks."""
    files = [run.run_json, state / "roles.toml", run.journal, run.root]
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        files.insert(1, Path(json.loads(run.run_json.read_bytes())["workflow"]["path"]))
    return files


def stamp(path: Path) -> tuple[int, ...]:
    """What changes when `path` is fixed: a file's inode, size, mode, owner, mtime
    and ctime (`chattr -i` and `chmod` change only the ctime); a directory's
    inode, mode and owner (its times change with every lock file made in it).
    () for a path that cannot be read."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return ()
    owner = (st.st_ino, st.st_mode, st.st_uid, st.st_gid)
    if stat.S_ISDIR(st.st_mode):
        return owner
    return (*owner, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def stamps(run: RunDir, state: Path) -> dict[str, tuple[int, ...]]:
    """The stamp of each of the run's launch files."""
    return {str(path): stamp(path) for path in launch_files(run, state)}


def holds_launch(failure: LaunchFailure | None, now: Stamps) -> bool:
    """Whether `next` launches no process for a run no process holds: its last
    launch stopped before its started row and none of the files it could have
    stopped on changed since (a record without stamps holds nothing)."""
    if failure is None or failure.files is None:
        return False
    return dict(failure.files) == dict(now)


def record_failure(run: RunDir, failure: LaunchFailure) -> None:
    """Keep `failure` as the run's last failed launch (best effort: a record that
    cannot be written leaves the launcher's own report the only one)."""
    data = failure.to_json()
    if failure.files is not None:
        data["files"] = dict(failure.files)
    with contextlib.suppress(OSError):
        write_atomic(run.launch_failed, json.dumps(data).encode(), durable=False)


def read_failure(run: RunDir) -> LaunchFailure | None:
    """The run's last failed launch, or None (none, or a record not readable)."""
    try:
        data = json.loads(run.launch_failed.read_bytes())
        files = data.get("files")
        return LaunchFailure(
            pid=int(data["pid"]),
            reason=str(data["reason"]),
            at=str(data["at"]),
            started=data.get("started") is True,
            files=None
            if files is None
            else {str(path): tuple(int(n) for n in value) for path, value in files.items()},
        )
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None


def clear_failure(run: RunDir) -> None:
    """Remove the record: a process of the run has recorded its started row."""
    with contextlib.suppress(OSError):
        run.launch_failed.unlink(missing_ok=True)
