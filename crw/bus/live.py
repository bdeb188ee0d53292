"""Which call directories of a session run may hold a step or a close step.

A run keeps `steps/<call>/` for every call it ever ran (the packets stay), so a
listing of each is what a read of the bus cost: a thousand listings at every
`crw flow next` of a run of a thousand calls. The process that holds the run keeps
an index beside them, the file `steps/.live-<token>` (the token of its process
lock), a log of lines `+<call>` (the call's directory may hold a step or close
file) and `-<call>` (it holds none); the symlink `steps/.live` names it. A reader
reads the index and lists those directories alone, and every directory when the
index is not one a process that holds the run keeps (a run no process holds, or
one an older crw runs) or a line of it is not one the holder writes: the index is
never trusted after its process is gone, so a crash, or a power loss that took
part of it, costs the reader a full listing, never a step.

The index is a log, not a file per call: a file made and removed per call costs
the holder two inodes made and two freed a call, and on ext4 without a journal
(this project's machines) making an inode scans past every inode freed in the
last 30 s, so each one made costs more the more calls went before. The log is
appended through one descriptor (a mark is one write) and rewritten with the
marked calls alone when it holds COMPACT_LINES lines more than twice them.

The index may say more than it must, never less: the holder marks a call before it
writes a step or close file there, and unmarks it only when the directory holds
none, under a lock the call's writes hold too (the process's worker threads
write steps; other calls' writes go on meanwhile). A reader never unmarks; the
holder sweeps the calls whose close steps the owner's `next` took: only those it
wrote a close step in, or found marked when it opened the index (a step file
is retracted by the holder, which unmarks its call then). A write to the index
that fails stops the holder keeping it (the link is removed first): readers list
every directory from then on.

Only the holder writes step and close files, so it knows by name those it wrote
in a call's directory: whether the directory still holds one is a stat of each
(none when the holder removed them all itself: a bound step's retraction), not
a listing of the directory, which holds the call's packets too. A directory it
found marked when it opened the index holds files it did not write: that one is
listed, until it is unmarked.

An ended run's process is gone, so its index is not trusted; but no process
writes a step to an ended run again, so once the ended row is durable the holder
keeps what its index marks as `steps/.ended` (`ended_index`, written atomically
and synced by `crw.bus.ended`):
a read of the ended run lists the calls whose close steps may wait, not every
call's. A process that takes the run removes it first (none does: an ended run's
process writes nothing).
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from crw.engine.run.rundir import PRIVATE_DIR, PRIVATE_FILE, RunDir
from crw.rawfile import read_bytes

LINK = ".live"
PREFIX = ".live-"
ENDED = ".ended"
"""The index an ended run keeps (`ended_index`)."""
COMPACT_LINES = 512
"""The index is rewritten when it holds this many lines more than twice its marks."""
_LINE = re.compile(rb"[+-][A-Za-z0-9][A-Za-z0-9._-]*")
"""A line the holder writes: a mark or an unmark of a call (one path segment)."""
_lock = threading.Lock()
"""Held while an index is opened, written or closed."""
_STRIPES = 64
_call_locks = [threading.Lock() for _ in range(_STRIPES)]
"""A call's writes and its unmarking hold one of these (by the call's hash):
writes of other calls go on meanwhile."""


@dataclass
class _Index:
    """The index this process keeps for one run."""

    steps: Path
    path: Path
    fd: int
    """The index's file, open for appending."""
    marked: set[str]
    swept: set[str]
    """The calls the sweep looks at: those a close step was written in, or marked
    when the index was opened, and not unmarked since (the owner removes close
    steps; the holder retracts step files itself)."""
    lines: int = field(default=0)
    found: set[str] = field(default_factory=set)
    """The calls marked when the index was opened and not unmarked since: their
    directories hold files an earlier process wrote, which only a listing finds."""
    written: dict[str, set[str]] = field(default_factory=dict)
    """By call, the step and close files this process wrote in its directory and
    has not seen gone (a name whose write failed is kept: a stat finds it absent)."""
    closed: list[str] = field(default_factory=list)
    """The calls of the close steps written since the last report (`reported`)."""

    def append(self, line: str) -> None:
        """Append one line, the set of marks changed first by the caller (so a
        compaction this append makes writes it); a write that fails stops the
        index being kept (`abandon`)."""
        try:
            _write_all(self.fd, line.encode())
            self.lines += 1
            if self.lines > COMPACT_LINES + 2 * len(self.marked):
                self.compact()
        except OSError:
            self.abandon()

    def compact(self) -> None:
        """Rewrite the index with its marked calls alone (a reader sees the old
        file or the new, each whole).

        Raises:
            OSError: the new file could not be written (none is left).
        """
        temp = self.steps / f".{self.path.name}.tmp"
        try:
            fd = _new_log(temp, self.marked)
            os.replace(temp, self.path)
        except OSError:
            with contextlib.suppress(OSError):
                temp.unlink()
            raise
        os.close(self.fd)
        self.fd, self.lines = fd, len(self.marked)

    def abandon(self) -> None:
        """Stop keeping the index, its link removed so that no reader trusts it
        (readers list every directory from then on).

        Raises:
            OSError: the link could not be removed: the index, perhaps lacking a
                mark, could still be trusted (so the step is not written).
        """
        _indexes.pop(self.steps, None)
        with contextlib.suppress(OSError):
            os.close(self.fd)
        try:
            name = os.readlink(self.steps / LINK)
        except FileNotFoundError:
            return
        if name == self.path.name:
            os.unlink(self.steps / LINK)


_indexes: dict[Path, _Index] = {}
"""The index this process keeps, by the run's steps directory."""


def _call_lock(call: str) -> threading.Lock:
    return _call_locks[zlib.crc32(call.encode()) % _STRIPES]


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _new_log(path: Path, calls: set[str]) -> int:
    """A new index file at `path` marking `calls`, open for appending."""
    fd = os.open(
        path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND | os.O_CLOEXEC, PRIVATE_FILE
    )
    try:
        _write_all(fd, "".join(f"+{call}\n" for call in sorted(calls)).encode())
    except BaseException:
        os.close(fd)
        raise
    return fd


def holds_files(directory: Path | str) -> bool:
    """Whether a call's directory holds a step or close file (any `.json`)."""
    try:
        return any(name.endswith(".json") for name in os.listdir(directory))
    except (FileNotFoundError, NotADirectoryError):
        return False


def call_dirs(steps: Path) -> list[str]:
    """Every call's directory under steps/ (the directory entries' types, no stat)."""
    try:
        with os.scandir(steps) as entries:
            return [e.path for e in entries if not e.name.startswith(".") and e.is_dir()]
    except FileNotFoundError:  # steps/ not made yet
        return []


def open_index(run: RunDir, token: str) -> None:
    """Index the run's call directories that hold a step or close file now, as the
    process whose lock token is `token`, and keep the index from now on (an older
    process's index is removed). Call it before this process writes any step."""
    import shutil  # the holder's alone: a command that reads the bus never imports it

    steps = run.steps
    steps.mkdir(mode=PRIVATE_DIR, parents=True, exist_ok=True)
    path, temp = steps / f"{PREFIX}{token}", steps / f".{LINK}.{token}"
    with _lock:
        marked = {
            os.path.basename(directory) for directory in call_dirs(steps) if holds_files(directory)
        }
        if path.is_dir():  # an older crw's index under the same token
            shutil.rmtree(path, ignore_errors=True)
        fd = _new_log(path, marked)
        temp.unlink(missing_ok=True)
        os.symlink(path.name, temp)
        os.replace(temp, steps / LINK)
        _indexes[steps] = _Index(steps, path, fd, marked, set(marked), len(marked), set(marked))
    (steps / ENDED).unlink(missing_ok=True)  # an ended run gets no process: never stale
    for old in steps.glob(f"{PREFIX}*"):
        if old != path:
            if old.is_dir() and not old.is_symlink():
                shutil.rmtree(old, ignore_errors=True)
            else:
                old.unlink(missing_ok=True)


def close_index(run: RunDir) -> None:
    """Stop keeping the index (the process lets the run go; readers list it all)."""
    with _lock:
        index = _indexes.pop(run.steps, None)
        if index is not None:
            os.close(index.fd)


@contextlib.contextmanager
def writing(run: RunDir, call: str, name: str, *, close: bool = False) -> Iterator[None]:
    """Held while the step or close file `name` of `call` is written: the call is
    marked first, and no sweep unmarks it meanwhile; a `close` file's call is swept
    from now on (the owner removes it, not this process). A mark that cannot be
    written stops the index being kept (readers list every directory).

    Raises:
        OSError: neither the mark nor the index's link could be written: the step
            must not be written.
    """
    with _call_lock(call):
        with _lock:
            index = _indexes.get(run.steps)
            if index is not None:
                if call not in index.marked:
                    index.marked.add(call)  # before the write: a compaction keeps it
                    index.append(f"+{call}\n")
                index.written.setdefault(call, set()).add(name)
                if close:
                    index.swept.add(call)
                    index.closed.append(call)
        yield


def settle(run: RunDir, call: str, removed: str | None = None) -> None:
    """Unmark `call` when its directory holds no step or close file; `removed`
    is the file of it this process has just removed (a retracted step)."""
    with _call_lock(call):
        with _lock:
            index = _indexes.get(run.steps)
            if index is None:
                return
            written = index.written.get(call, set())
            if removed is not None:
                written.discard(removed)
            if call not in index.marked and call not in index.swept:
                return
            names, listed = list(written), call in index.found
        directory = os.path.join(index.steps, call)
        if listed and holds_files(directory):
            return
        if any(os.path.exists(os.path.join(directory, name)) for name in names):
            return
        with _lock:
            index = _indexes.get(run.steps)
            if index is None:
                return
            index.swept.discard(call)
            index.found.discard(call)
            index.written.pop(call, None)
            if call in index.marked:
                index.marked.discard(call)
                index.append(f"-{call}\n")


def sweep(run: RunDir) -> None:
    """Unmark every swept call whose directory holds no step or close file (the
    owner's `next` removed its close steps): a stat of each close step written and
    not seen gone since (a listing of a directory found marked at the index's
    opening), none of the calls whose step files alone mark them (their
    retraction unmarks them)."""
    with _lock:
        index = _indexes.get(run.steps)
        calls = list(index.swept) if index is not None else []
    for call in calls:
        settle(run, call)
    with _lock:
        index = _indexes.get(run.steps)
        if index is not None and index.closed:  # a report need not look at the unmarked
            index.closed = [c for c in index.closed if c in index.swept]


def reported(run: RunDir) -> None:
    """A report came: the owner's `next` that handed out its step removed every
    close step there was when it read (it removes each it hands out). Unmark the
    calls of the close steps written since the last report whose files are gone
    (a stat of each), not at the next sweep, so a reader lists their directories
    no more. Each close step is looked at this way once at most: one still there
    (written after that `next` read) is left to the sweep."""
    with _lock:
        index = _indexes.get(run.steps)
        if index is None or not index.closed:
            return
        due, index.closed = index.closed, []
    for call in due:
        settle(run, call)


def live_calls(run: RunDir) -> list[str] | None:
    """The call directories the index of the process holding the run marks; None
    when there is no such index, or a line of it is not one its holder writes
    (then every call's directory is listed)."""
    from crw.engine.run.locks import is_held  # the lock check only when an index is there

    try:
        name = os.readlink(run.steps / LINK)
    except OSError:
        return None
    token = name[len(PREFIX) :]
    if not name.startswith(PREFIX) or not is_held(run.process_lock(token)):
        return None
    return _read_index(run, name)


def ended_index(run: RunDir) -> bytes | None:
    """What an ended run keeps as `steps/.ended` (`crw.bus.ended`): the calls the
    holding process's index marks, a `+call` line each; None when this process
    keeps no index. Only once the run's ended row is durable: no process writes a
    step to an ended run again (its process writes nothing), so a read of the
    ended run, its process gone, lists those call directories alone (the close
    steps the owner has not taken), not every call's."""
    calls = live_calls(run)
    if calls is None:
        return None
    return "".join(f"+{os.path.basename(call)}\n" for call in sorted(calls)).encode()


def ended_calls(run: RunDir) -> list[str] | None:
    """The call directories an ended run's index (`ended_index`) marks; None when
    there is none, or a line of it is not one `ended_index` writes."""
    return _read_index(run, ENDED)


def _read_index(run: RunDir, name: str) -> list[str] | None:
    path = str(run.steps / name)
    try:
        data = read_bytes(path)
    except OSError:
        return None
    with _read_lock:
        kept = _reads.pop(path, None)
    if kept is None or len(data) < kept.end or zlib.crc32(data[: kept.end]) != kept.crc:
        kept = _Read()
    # The text after the last newline is a line being written: its call's files
    # are written only after it is whole.
    end = data.rfind(b"\n") + 1
    for line in data[kept.end : end].splitlines():
        if not _LINE.fullmatch(line):
            return None
        if line[0] == ord("+"):
            kept.marked.add(line[1:])
        else:
            kept.marked.discard(line[1:])
    kept.crc = zlib.crc32(memoryview(data)[kept.end : end], kept.crc)
    kept.end = end
    with _read_lock:
        _reads[path] = kept
        while len(_reads) > KEPT_READS:
            del _reads[next(iter(_reads))]
    steps = str(run.steps)
    return [os.path.join(steps, call.decode()) for call in kept.marked]


@dataclass
class _Read:
    """What a reader of this process made of an index file: the calls its first
    `end` bytes (their CRC-32: `crc`) mark. The holder appends to its index (a
    compaction, or a new index, is a new file), so the next read of the file
    parses only the lines appended since, once the bytes it parsed are found
    unchanged (else it parses the file whole)."""

    end: int = 0
    crc: int = 0
    marked: set[bytes] = field(default_factory=set)


KEPT_READS = 8
"""The most index files whose reads a process keeps."""
_reads: dict[str, _Read] = {}
_read_lock = threading.Lock()
