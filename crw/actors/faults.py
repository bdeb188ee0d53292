"""The faults that stop a run process, each told in one line: what, where, the fix.

A fault deep in a call's task comes out of the run's Trio nurseries wrapped in one
exception group per nursery on its way up; `root_causes` unwraps them to what was
raised. Three faults stop the process (docs/faults.md):

- the journal cannot be written (`JournalWriteError`): no row can record it, so
  the process stops with the line alone; the journal keeps its durable rows;
- a file of the run directory cannot be written (an `OSError`: replies/, inbox/,
  a close step, a call's directory; a full disk, a read-only file system, no
  permission): the run is paused, reason write_failed, with the error and file;
- the host cannot be reached (`HostUnavailable`): the run is paused, reason
  host_unavailable; the calls in flight keep their rows.

Anything else is a defect, raised as itself (alone when it is the one root cause).
`classify` decides; it writes nothing.
"""

from __future__ import annotations

import errno
import os
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, NoReturn

from crw.actors.journal_writer import JournalWriteError
from crw.host.errors import HostUnavailable
from crw.journal.store import StoreError

FaultReason = Literal["journal_unwritable", "write_failed", "host_unavailable"]


@dataclass(frozen=True)
class Fault:
    """What stops the run: `reason` (the paused row's; journal_unwritable writes
    none), `error` and `file` (the row's fields) and the one `line` to show."""

    reason: FaultReason
    error: str
    file: str | None
    line: str

    @property
    def pauses(self) -> bool:
        """Whether a paused row records it (the journal can still be written)."""
        return self.reason != "journal_unwritable"


def root_causes(exc: BaseException) -> list[BaseException]:
    """The exceptions an exception group holds, however deep; `[exc]` for one."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in root_causes(inner)]
    return [exc]


def classify(exc: BaseException, run_id: str, journal: Path) -> Fault | None:
    """The fault `exc` is, or None when any of its root causes is no fault."""
    leaves = root_causes(exc)
    if not all(isinstance(leaf, JournalWriteError | OSError | HostUnavailable) for leaf in leaves):
        return None
    resume = f"then go on with: crw flow resume {run_id} --detach"
    for leaf in leaves:
        if isinstance(leaf, JournalWriteError):
            cause = leaf.__cause__ if isinstance(leaf.__cause__, OSError) else None
            error = describe(cause) if cause is not None else str(leaf)
            line = f"run {run_id} stopped: cannot write its journal {journal}: {error}"
            line += f"; {fix(cause)}, {resume}"
            return Fault("journal_unwritable", error, str(journal), line)
    for leaf in leaves:
        if isinstance(leaf, OSError):
            error, file = describe(leaf), leaf.filename
            where = f"{file}: " if file is not None else ""
            line = f"run {run_id} paused (write_failed): {where}{error}; {fix(leaf)}, {resume}"
            return Fault("write_failed", error, str(file) if file is not None else None, line)
    error = str(leaves[0])
    line = f"run {run_id} paused (host_unavailable): {error}; bring the host back, {resume}"
    return Fault("host_unavailable", error, None, line)


def describe(err: OSError) -> str:
    """`No space left on device (ENOSPC)`."""
    name = errno.errorcode.get(err.errno or 0)
    text = err.strerror or str(err)
    return f"{text} ({name})" if name else text


_FIXES = {
    errno.ENOSPC: "free space on its file system",
    errno.EDQUOT: "free space within this user's disk quota",
    errno.EACCES: "give this user read and write access to it and its directory",
    errno.EPERM: "clear its immutable flag (chattr -i) or give this user write access to it",
    errno.EROFS: "remount its file system read-write",
    errno.ENOTDIR: "put back the directory a file stands in for",
    errno.EEXIST: "put back the directory a file stands in for",
    errno.EISDIR: "remove the directory that stands where the file goes",
}


def fix(err: OSError | None) -> str:
    """What the user does about `err` (an EPERM names the `chattr` to run on its
    file: a file the mode bits refuse is EACCES; an immutable one, whoever writes
    it, root too, is EPERM)."""
    if err is None:
        return "check the disk"
    if isinstance(err, StoreError):  # a journal in a database: no disk of this machine's
        return err.fix
    if err.errno == errno.EPERM and err.filename is not None:
        file = shlex.quote(os.fsdecode(err.filename))
        return f"clear its immutable flag (chattr -i {file}) or give this user write access to it"
    return _FIXES.get(err.errno or 0, "check the disk and the file")


def raise_root(exc: BaseException) -> NoReturn:
    """Raise `exc`'s one root cause alone, its own cause and context kept (not
    the group being handled), else `exc` as it is."""
    leaves = root_causes(exc)
    if len(leaves) != 1 or leaves[0] is exc:
        raise exc
    leaf, context = leaves[0], leaves[0].__context__
    try:
        raise leaf
    finally:
        leaf.__context__ = context
        del leaf, context
