"""What the spawn hook reads and writes: the owner's open orchestrator line and the
ledger `<state>/flow-bound/decisions/<owner>.jsonl`, one line a decision.

Neither ever refuses a spawn: a flow-bound directory or file that cannot be trusted
reads as no binding, with a warning, and a ledger that cannot be written leaves
the decision as it is, with a warning (spec, session-calls.md, the spawn hook).
Standard library only.
"""

from __future__ import annotations

import errno
import json
import os
from dataclasses import dataclass
from pathlib import Path
from stat import S_ISDIR
from typing import Any

from crw.binding.lines import (
    append_lines,
    flow_bound_dir,
    is_segment,
    owner_file,
    read_last_line,
    untrusted,
)

DECISIONS = "decisions"
_NO_BINDING = "read as no binding: the owner's spawns go ahead undecided"


@dataclass(frozen=True)
class Binding:
    """The owner's open orchestrator line (None: not bound), and the warning of a
    binding that could not be read or trusted."""

    line: dict[str, Any] | None
    warning: str | None = None


def ledger_file(state: Path, owner: str) -> Path:
    return flow_bound_dir(state) / DECISIONS / f"{owner}.jsonl"


def read_binding(state: Path, owner: str) -> Binding:
    """The open orchestrator line of `owner`, read without a lock and without
    writing anything."""
    if not is_segment(owner):
        return Binding(None)
    directory = flow_bound_dir(state)
    try:
        stat = os.lstat(directory)
    except FileNotFoundError:
        return Binding(None)
    except OSError as err:
        return Binding(None, f"cannot read {directory}: {err.strerror}; {_NO_BINDING}")
    if not S_ISDIR(stat.st_mode):
        return Binding(None, f"{directory} is not a directory (a symbolic link?); {_NO_BINDING}")
    distrust = untrusted(directory, stat)
    if distrust is not None:
        return Binding(None, f"{distrust}; {_NO_BINDING}")
    path = owner_file(state, owner)
    try:
        last = read_last_line(path)
    except OSError as err:
        return Binding(None, f"cannot read {path}: {err.strerror}; {_NO_BINDING}")
    reason = last.untrusted or last.unreadable
    if reason is not None:
        return Binding(None, f"{reason}; {_NO_BINDING}")
    return Binding(last.line if last.open_run is not None else None)


def append_decision(state: Path, owner: str, line: dict[str, Any]) -> str | None:
    """Append one ledger line; the warning when it cannot be written, else None."""
    path = ledger_file(state, owner)
    try:
        path.parent.mkdir(mode=0o700, exist_ok=True)
        stat = os.lstat(path.parent)
        distrust = (
            f"{path.parent} is not a directory (a symbolic link?)"
            if not S_ISDIR(stat.st_mode)
            else untrusted(path.parent, stat)
        )
        if distrust is None and path.exists():
            distrust = untrusted(path, os.lstat(path))
        if distrust is not None:
            raise OSError(errno.EPERM, distrust, str(path))
        append_lines(path, [line])
    except OSError as err:
        return (
            f"cannot write the spawn ledger {path}: {err.strerror or err}; the spawn goes "
            f"ahead as decided, unrecorded: make {path.parent} the user's own and writable"
        )
    return None


def read_decisions(state: Path, owner: str) -> list[dict[str, Any]]:
    """The owner's ledger lines, oldest first, for the run that looks a published
    step up after a restart. A ledger that is missing, cannot be read or cannot
    be trusted reads as no line; a line that is no JSON object is skipped."""
    if not is_segment(owner):
        return []
    path = ledger_file(state, owner)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return []
    with os.fdopen(fd, "rb") as file:
        if untrusted(path, os.fstat(file.fileno())) is not None:
            return []
        data = file.read()
    lines = []
    for raw in data.splitlines():
        try:
            line = json.loads(raw)
        except ValueError:
            continue
        if isinstance(line, dict):
            lines.append(line)
    return lines
