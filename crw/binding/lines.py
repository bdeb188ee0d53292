"""The flow-bound files as read and appended, with the standard library only: the
spawn hook reads the owner's line on every tool call, so nothing here imports the
lock (filelock) the binding takes in `owner.py`.

`<state>/flow-bound/<owner>.jsonl` holds the owner's orchestrator lines; a file or
directory that cannot be trusted (a link, another user's, writable by group or
others) is read as no binding, and so is a last orchestrator line that Line.Validate
refuses (`validate_line`): every reader of the line reads it through
`read_last_line`.
"""

from __future__ import annotations

import errno
import json
import os
from dataclasses import dataclass
from pathlib import Path
from stat import S_ISLNK
from typing import Any

from crw.rawfile import read_open

FLOW_BOUND = "flow-bound"
ORCHESTRATOR = "orchestrator"
CLOSED = "closed"
REQUIRED_ROLES = ("architect", "executor", "executor-t1", "reviewer", "explorer")
"""The roles every orchestrator line pairs. The critic is optional: the open line an
earlier crw bound has none, and its critic spawns are undecided (BIND-LINE-4)."""


@dataclass(frozen=True)
class LastLine:
    """The owner's last line as read: the object, or why it could not be read, or
    why the file cannot be trusted (then nothing is written to it either)."""

    line: dict[str, Any] | None
    unreadable: str | None = None
    untrusted: str | None = None

    @property
    def open_run(self) -> str | None:
        """The run an open orchestrator line binds, else None."""
        if self.line is not None and self.line.get("kind") == ORCHESTRATOR:
            run_id = self.line.get("run_id")
            return run_id if isinstance(run_id, str) else None
        return None


def flow_bound_dir(state: Path) -> Path:
    return state / FLOW_BOUND


def owner_file(state: Path, owner: str) -> Path:
    return flow_bound_dir(state) / f"{owner}.jsonl"


def read_last_line(path: Path) -> LastLine:
    """The last non-blank line of `path`; a missing file has none. The file is
    opened without following a symbolic link, and one that cannot be trusted (a
    link, another user's, writable by group or others) is read as no binding,
    its reason in `untrusted`.

    Raises:
        OSError: the file exists and cannot be read.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return LastLine(None)
    except OSError as err:
        if err.errno != errno.ELOOP:
            raise
        return LastLine(None, untrusted=f"{path} is a symbolic link")
    try:
        stat = os.fstat(fd)
        distrust = untrusted(path, stat)
        if distrust is not None:
            return LastLine(None, untrusted=distrust)
        # Raw: `next` reads the line at each read, the spawn hook at each tool
        # call; a buffered reader adds two fstats, an ioctl and two lseeks.
        data = read_open(fd, stat.st_size)
    finally:
        os.close(fd)
    lines = [raw for raw in data.splitlines() if raw.strip()]
    if not lines:
        return LastLine(None)
    try:
        parsed = json.loads(lines[-1])
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        return LastLine(None, f"the last line of {path} is unreadable ({err})")
    if not isinstance(parsed, dict):
        return LastLine(None, f"the last line of {path} is not a JSON object")
    invalid = validate_line(parsed)
    if invalid is not None:
        return LastLine(None, f"the last line of {path} is {invalid}")
    return LastLine(parsed)


def validate_line(line: dict[str, Any]) -> str | None:
    """Line.Validate: why `line`, an orchestrator line, binds nothing, else None.

    It needs a run_id and helperPairs with the pair (an object, maybe empty: the
    role undecided) of each of `REQUIRED_ROLES` (BIND-LINE-3). Any other key of
    helperPairs (critic's, or the retired role key of the crw.reviewerFinal op an
    earlier crw wrote) is read and left alone: the hook only ever looks up the
    pair of one of the six roles (BIND-LINE-5). A line of another kind is valid.
    """
    if line.get("kind") != ORCHESTRATOR:
        return None
    if not isinstance(line.get("run_id"), str):
        return "an orchestrator line without run_id"
    pairs = line.get("helperPairs")
    if not isinstance(pairs, dict):
        return "an orchestrator line without helperPairs"
    missing = [role for role in REQUIRED_ROLES if not isinstance(pairs.get(role), dict)]
    if missing:
        return f"an orchestrator line without the pairs of {', '.join(missing)}"
    return None


def untrusted(path: Path, stat: os.stat_result) -> str | None:
    """Why a flow-bound file or directory with `stat` (its lstat) cannot be trusted,
    or None: it is a symbolic link, another user owns it, or group or others may
    write it."""
    if S_ISLNK(stat.st_mode):
        return f"{path} is a symbolic link"
    if stat.st_uid != os.getuid():
        return f"{path} is owned by another user (uid {stat.st_uid})"
    if stat.st_mode & 0o022:
        return f"{path} is writable by group or others (mode {stat.st_mode & 0o777:o})"
    return None


def append_lines(path: Path, lines: list[dict[str, Any]]) -> None:
    """Append `lines` in one write and fsync; a torn last line gets its newline first."""
    if not lines:
        return
    data = "".join(json.dumps(one, ensure_ascii=False) + "\n" for one in lines).encode()
    created = not path.exists()
    flags = os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(path, flags, 0o600)
    try:
        if created:
            os.fchmod(fd, 0o600)
        if not created and _ends_torn(fd):
            data = b"\n" + data
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    if created:
        _fsync_dir(path.parent)


def _ends_torn(fd: int) -> bool:
    size = os.fstat(fd).st_size
    return size > 0 and os.pread(fd, 1, size - 1) != b"\n"


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def is_segment(name: str) -> bool:
    return bool(name) and name not in (".", "..") and "/" not in name and "\0" not in name
