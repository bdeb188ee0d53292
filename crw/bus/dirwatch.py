"""A wake for files that arrive in one directory (Linux inotify, through
`inotify_simple`), so a reader that polls the directory learns of a new file at
once instead of at its next poll.

It only shortens a wait: the reader still reads the file itself (the wake is no
proof it is whole or still there) and still looks now and then, so a platform
without inotify, a watch that could not be set, or events lost to an overflow
cost a poll's delay, never a file. A wake is a file renamed into the directory
(`IN_MOVED_TO`): the bus's atomic writes make their files so (a temporary name
first), and a wake at the temporary file's close would find nothing to read yet.

Two ways to wait: `wait` in a Trio task (the run's inbox), `arrivals` blocking a
thread (`crw flow dispatched` waiting for its reply). Trio is imported by the
Trio side alone: `dispatched` is a short process that never runs an event loop.

Closing an inotify descriptor that ever held a watch waits for the kernel to
free its marks (an RCU grace period: 8-16 ms on this machine), while removing a
watch does not wait and opening one costs microseconds. So a watch only waited
on by `arrivals` does not close its descriptor: `close` keeps the descriptor,
its watch still set, for the next `open` in this process (a process that waits
on replies one after another, or several at once, pays the grace period once,
at its exit, not at each reply). The next `open` of the same directory takes
the events queued meanwhile and uses the watch as it is, unless the kernel
removed it (its directory went) or the path names another directory now; an
`open` of another directory moves the descriptor's watch there. An owner that
reports one step after another (the bench's, hundreds a run) so sets no watch
and removes none at each report.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import math
import os
import select
import struct
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger("crw.bus")

_idle: list[Any] = []
"""inotify descriptors of this process no watch waits on, kept to be used again."""
_kept: dict[Any, _Kept] = {}
"""The watch each descriptor of `_idle` that holds one still holds."""
_idle_lock = threading.Lock()
EVENTS_BUFFER = 64 * 1024
"""Bytes a read of an inotify descriptor asks for (an event is 16 bytes and its name)."""


@dataclass(frozen=True)
class _Kept:
    """A kept descriptor's watch: of `directory` (as `open` was given it), whose
    device and inode were `ident`, under the watch descriptor `wd`."""

    directory: str
    ident: tuple[int, int]
    wd: int


def inotify_simple() -> Any | None:
    """The `inotify_simple` module, its C library loaded (None where it cannot be
    imported: not Linux, no termios/fcntl/poll). Every user of inotify takes it
    from here, so that no process pays for `find_library`.

    Left to itself, its first `INotify` loads libc by `ctypes.util.find_library("c")`,
    which forks and runs `/sbin/ldconfig -p` and reads its listing: a child
    process of every process's first watch (each `crw flow dispatched`, the run
    process at its start), and ~2 ms of it (0.2 ms so). libc is in this process
    already, so the functions are looked up in the process's own symbols
    instead (`CDLL(None)`, dlopen of the main program), with errno kept as it did."""
    try:
        import inotify_simple as module
    except ImportError:
        return None
    if getattr(module, "_libc", None) is None:
        module._libc = ctypes.CDLL(None, use_errno=True)
    return module


def _inotify() -> tuple[Any, int, int] | None:
    """inotify_simple's INotify class and the IN_MOVED_TO and IN_Q_OVERFLOW flags,
    or None where it cannot be imported."""
    module = inotify_simple()
    if module is None:
        return None
    return module.INotify, int(module.flags.MOVED_TO), int(module.flags.Q_OVERFLOW)


class DirWatch:
    """An inotify descriptor watching one directory for files that arrive."""

    def __init__(self, inotify: Any, watch: _Kept, overflow: int) -> None:
        self._inotify = inotify
        self._watch = watch
        self._wd = watch.wd
        self._poller = select.poll()
        self._poller.register(inotify.fileno(), select.POLLIN)
        self._overflow = overflow
        self._closed = False
        self._in_trio = False

    @classmethod
    def open(cls, directory: Path) -> DirWatch | None:
        """A watch of `directory`, or None where none can be set (not Linux, no
        directory, no inotify left): the caller's poll alone then finds its files."""
        found = _inotify()
        if found is None:
            return None
        inotify_class, moved_to, overflow = found
        key = os.fspath(directory)
        with _idle_lock:
            inotify = _take_idle(key)
            kept = _kept.pop(inotify, None) if inotify is not None else None
        if inotify is None:
            try:
                inotify = inotify_class(nonblocking=True)
            except (OSError, AttributeError) as err:  # AttributeError: a libc without inotify
                log.debug("no inotify for %s: %s", directory, err)
                return None
        try:
            kept = _rewatch(inotify, kept, key, moved_to)
        except OSError as err:
            log.debug("no inotify watch of %s: %s", directory, err)
            _keep(inotify)
            return None
        return cls(inotify, kept, overflow)

    async def wait(self, seconds: float) -> None:
        """Until a file arrives in the directory (or arrived since the last wait),
        or `seconds` pass; the events are taken, so the next wait waits again."""
        import trio

        if self._closed:
            await trio.sleep(seconds)
            return
        self._in_trio = True
        with trio.move_on_after(seconds):
            await trio.lowlevel.wait_readable(self._inotify.fileno())
        self._inotify.read(timeout=0)

    async def arrived(self, seconds: float) -> frozenset[str] | None:
        """`arrivals` for a Trio task: sleeps on the descriptor (no thread blocked)
        until a file arrives or `seconds` pass; then the names, as `arrivals`."""
        import trio

        if self._closed:
            await trio.sleep(seconds)
            return None
        self._in_trio = True
        with trio.move_on_after(seconds):
            await trio.lowlevel.wait_readable(self._inotify.fileno())
        return self.arrivals(0)

    def arrivals(self, seconds: float) -> frozenset[str] | None:
        """Block the thread until a file arrives in the directory (or arrived since
        the last call), or `seconds` pass: the names that arrived, empty when none
        did in time; None when some were lost (the kernel's queue overflowed) or
        the watch is closed: look at the directory."""
        if self._closed:
            return None
        # A poll, then a read of what it found: two syscalls (inotify_simple's
        # read asks FIONREAD before and after its poll).
        events = []
        if self._poller.poll(max(math.ceil(seconds * 1000), 0)):
            events = read_events(self._inotify)
        if any(event.mask & self._overflow for event in events):
            return None
        return frozenset(event.name for event in events if event.wd == self._wd)

    def close(self) -> None:
        """Stop watching. A descriptor a Trio task waited on is closed; another is
        kept, its watch removed, for the next `open`."""
        if self._closed:
            return
        self._closed = True
        if self._in_trio:
            import trio

            with contextlib.suppress(RuntimeError):  # outside Trio: nobody waits on it
                trio.lowlevel.notify_closing(self._inotify.fileno())
            self._inotify.close()
            return
        with _idle_lock:
            _kept[self._inotify] = self._watch
            _idle.append(self._inotify)


def _keep(inotify: Any) -> None:
    """Keep a descriptor that holds no watch for the next `open`, its events taken
    (the removal's IN_IGNORED, files that arrived since the last wait)."""
    inotify.read(timeout=0)
    with _idle_lock:
        _idle.append(inotify)


def _take_idle(directory: str) -> Any:
    """A kept descriptor, one that watches `directory` if there is one (under
    `_idle_lock`); None when none is kept."""
    for n, inotify in enumerate(_idle):
        kept = _kept.get(inotify)
        if kept is not None and kept.directory == directory:
            return _idle.pop(n)
    return _idle.pop() if _idle else None


def _rewatch(inotify: Any, kept: _Kept | None, directory: str, moved_to: int) -> _Kept:
    """The watch of `directory` on `inotify`: the one it kept, its events queued
    meanwhile taken, when the kernel did not remove it and the path is the same
    directory still; else a new watch (a kept one removed first).

    Raises:
        OSError: the watch cannot be set (no such directory, no watch left).
    """
    events = _drain(inotify)
    if kept is not None:
        if kept.directory == directory and not any(
            wd == kept.wd and mask & _IGNORED for wd, mask in events
        ):
            with contextlib.suppress(OSError):
                stat = os.stat(directory)
                if (stat.st_dev, stat.st_ino) == kept.ident:
                    return kept
        with contextlib.suppress(OSError):  # the kernel removed it: its directory went
            inotify.rm_watch(kept.wd)
        _drain(inotify)  # the removal's IN_IGNORED, queued by it: no wake of the new watch
    wd = int(inotify.add_watch(directory, moved_to))
    stat = os.stat(directory)
    return _Kept(directory, (stat.st_dev, stat.st_ino), wd)


_IGNORED = 0x8000
"""IN_IGNORED: the kernel removed the watch (its directory went, or rm_watch)."""


_HEAD = struct.Struct("iIII")
"""An inotify event's header: wd, mask, cookie and the length of the name after it."""


def _drain(inotify: Any) -> list[tuple[int, int]]:
    """The (wd, mask) of the events queued on the non-blocking `inotify`, their
    names skipped, not decoded: a kept descriptor's queue holds every file that
    arrived while it was idle (every other report's reply), and only whether the
    kernel removed the watch matters then."""
    events: list[tuple[int, int]] = []
    while True:
        try:
            data = os.read(inotify.fileno(), EVENTS_BUFFER)
        except BlockingIOError:
            return events
        offset = 0
        while offset < len(data):
            wd, mask, _, size = _HEAD.unpack_from(data, offset)
            events.append((wd, mask))
            offset += _HEAD.size + size
        if len(data) < EVENTS_BUFFER // 2:  # the queue is empty: a read takes all it can
            return events


def read_events(inotify: Any) -> list[Any]:
    """The events queued on the non-blocking `inotify`, none when none is."""
    from inotify_simple import parse_events

    events: list[Any] = []
    while True:
        try:
            data = os.read(inotify.fileno(), EVENTS_BUFFER)
        except BlockingIOError:
            return events
        events += parse_events(data)
        if len(data) < EVENTS_BUFFER // 2:  # the queue is empty: a read takes all it can
            return events
