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
thread (`crw flow dispatched` waiting for its reply).

Closing an inotify descriptor that ever held a watch waits for the kernel to
free its marks (an RCU grace period: 8-16 ms on this machine), while removing a
watch does not wait and opening one costs microseconds. So a watch only waited
on by `arrivals` does not close its descriptor: `close` removes the watch and
keeps the descriptor for the next `open` in this process (a process that waits
on replies one after another, or several at once, pays the grace period once,
at its exit, not at each reply; by then the kernel has freed the removed watch's
marks and the close does not wait).
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
from pathlib import Path
from typing import Any

import trio

log = logging.getLogger("crw.bus")

_idle: list[Any] = []
"""inotify descriptors of this process that hold no watch, kept to be used again."""
_idle_lock = threading.Lock()


def _inotify() -> tuple[Any, int, int] | None:
    """inotify_simple's INotify class and the IN_MOVED_TO and IN_Q_OVERFLOW flags,
    or None where it cannot be imported (not Linux: no termios/fcntl/poll)."""
    try:
        from inotify_simple import INotify, flags
    except ImportError:
        return None
    return INotify, int(flags.MOVED_TO), int(flags.Q_OVERFLOW)


class DirWatch:
    """An inotify descriptor watching one directory for files that arrive."""

    def __init__(self, inotify: Any, wd: int, overflow: int) -> None:
        self._inotify = inotify
        self._wd = wd
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
        with _idle_lock:
            inotify = _idle.pop() if _idle else None
        if inotify is None:
            try:
                inotify = inotify_class(nonblocking=True)
            except (OSError, AttributeError) as err:  # AttributeError: a libc without inotify
                log.debug("no inotify for %s: %s", directory, err)
                return None
        try:
            wd = inotify.add_watch(directory, moved_to)
        except OSError as err:
            log.debug("no inotify watch of %s: %s", directory, err)
            _keep(inotify)
            return None
        return cls(inotify, wd, overflow)

    async def wait(self, seconds: float) -> None:
        """Until a file arrives in the directory (or arrived since the last wait),
        or `seconds` pass; the events are taken, so the next wait waits again."""
        if self._closed:
            await trio.sleep(seconds)
            return
        self._in_trio = True
        with trio.move_on_after(seconds):
            await trio.lowlevel.wait_readable(self._inotify.fileno())
        self._inotify.read(timeout=0)

    def arrivals(self, seconds: float) -> frozenset[str] | None:
        """Block the thread until a file arrives in the directory (or arrived since
        the last call), or `seconds` pass: the names that arrived, empty when none
        did in time; None when some were lost (the kernel's queue overflowed) or
        the watch is closed: look at the directory."""
        if self._closed:
            return None
        events = self._inotify.read(timeout=max(math.ceil(seconds * 1000), 0))
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
            with contextlib.suppress(RuntimeError):  # outside Trio: nobody waits on it
                trio.lowlevel.notify_closing(self._inotify.fileno())
            self._inotify.close()
            return
        with contextlib.suppress(OSError):  # the kernel removed it: its directory went
            self._inotify.rm_watch(self._wd)
        _keep(self._inotify)


def _keep(inotify: Any) -> None:
    """Keep a descriptor that holds no watch for the next `open`, its events taken
    (the removal's IN_IGNORED, files that arrived since the last wait)."""
    inotify.read(timeout=0)
    with _idle_lock:
        _idle.append(inotify)
