"""Which call directories of a session run may hold a step or a close step.

A run keeps `steps/<call>/` for every call it ever ran (the packets stay), so a
listing of each is what a read of the bus cost: a thousand listings at every
`crw flow next` of a run of a thousand calls. The process that holds the run keeps
an index beside them, `steps/.live-<token>/` (the token of its process lock), of
one empty file per call whose directory may hold a step or close file; the symlink
`steps/.live` names it. A reader lists the index and those directories alone, and
every directory when the index is not one a process that holds the run keeps (a
run no process holds, or one an older crw runs): the index is never trusted after
its process is gone, so a crash, or a power loss that took part of it, costs the
reader a full listing, never a step.

The index may say more than it must, never less: the holder marks a call before it
writes a step or close file there, and unmarks it only when the directory holds
none, under a lock the call's writes hold too (the process's worker threads
write steps; other calls' writes go on meanwhile). A reader never unmarks; the
holder sweeps the calls whose close steps the owner's `next` took: only those it
wrote a close step in, or found marked when it opened the index (a step file
is retracted by the holder, which unmarks its call then).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
import zlib
from collections.abc import Iterator
from pathlib import Path

from crw.engine.rundir import PRIVATE_DIR, PRIVATE_FILE, RunDir

LINK = ".live"
PREFIX = ".live-"
_lock = threading.Lock()
"""Held while an index is opened or closed."""
_indexes: dict[Path, Path] = {}
"""The index this process keeps, by the run's steps directory."""
_swept: dict[Path, set[str]] = {}
"""The calls each index's sweep looks at, by the run's steps directory: those a
close step was written in, or marked when the index was opened, and not unmarked
since (the owner removes close steps; the holder retracts step files itself)."""
_STRIPES = 64
_call_locks = [threading.Lock() for _ in range(_STRIPES)]
"""A call's writes and its unmarking hold one of these (by the call's hash):
writes of other calls go on meanwhile."""


def _call_lock(call: str) -> threading.Lock:
    return _call_locks[zlib.crc32(call.encode()) % _STRIPES]


def _mark(path: Path) -> None:
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, PRIVATE_FILE))


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
    steps = run.steps
    steps.mkdir(parents=True, exist_ok=True)
    index, temp = steps / f"{PREFIX}{token}", steps / f".{LINK}.{token}"
    with _lock:
        shutil.rmtree(index, ignore_errors=True)
        index.mkdir(mode=PRIVATE_DIR)
        marked: set[str] = set()
        for directory in call_dirs(steps):
            if holds_files(directory):
                _mark(index / os.path.basename(directory))
                marked.add(os.path.basename(directory))
        temp.unlink(missing_ok=True)
        os.symlink(index.name, temp)
        os.replace(temp, steps / LINK)
        _indexes[steps] = index
        _swept[steps] = marked
    for old in steps.glob(f"{PREFIX}*"):
        if old != index:
            shutil.rmtree(old, ignore_errors=True)


def close_index(run: RunDir) -> None:
    """Stop keeping the index (the process lets the run go; readers list it all)."""
    with _lock:
        _indexes.pop(run.steps, None)
        _swept.pop(run.steps, None)


@contextlib.contextmanager
def writing(run: RunDir, call: str, *, close: bool = False) -> Iterator[None]:
    """Held while a step or close file of `call` is written: the call is marked
    first, and no sweep unmarks it meanwhile; a `close` file's call is swept from
    now on (the owner removes it, not this process)."""
    with _call_lock(call):
        index = _indexes.get(run.steps)
        if index is not None:
            _mark(index / call)
            swept = _swept.get(run.steps)
            if close and swept is not None:
                swept.add(call)
        yield


def settle(run: RunDir, call: str) -> None:
    """Unmark `call` when its directory holds no step or close file."""
    with _call_lock(call):
        index = _indexes.get(run.steps)
        if index is not None and not holds_files(run.steps / call):
            (index / call).unlink(missing_ok=True)
            _swept.get(run.steps, set()).discard(call)


def sweep(run: RunDir) -> None:
    """Unmark every swept call whose directory holds no step or close file (the
    owner's `next` removed its close steps): one listing of each call a close step
    was written in and not unmarked since, none of the calls whose step files
    alone mark them (their retraction unmarks them)."""
    with _lock:
        calls = list(_swept.get(run.steps, ()))
    for call in calls:
        settle(run, call)


def live_calls(run: RunDir) -> list[str] | None:
    """The call directories the index of the process holding the run marks; None
    when there is no such index (then every call's directory is listed)."""
    from crw.engine.locks import is_held  # the lock check only when an index is there

    try:
        name = os.readlink(run.steps / LINK)
    except OSError:
        return None
    token = name[len(PREFIX) :]
    if not name.startswith(PREFIX) or not is_held(run.process_lock(token)):
        return None
    try:
        steps = str(run.steps)
        return [os.path.join(steps, call) for call in os.listdir(os.path.join(steps, name))]
    except OSError:
        return None
