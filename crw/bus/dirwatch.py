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
"""

from __future__ import annotations

import contextlib
import logging
import math
from pathlib import Path
from typing import Any

import trio

log = logging.getLogger("crw.bus")


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

    def __init__(self, inotify: Any, overflow: int) -> None:
        self._inotify = inotify
        self._overflow = overflow
        self._closed = False

    @classmethod
    def open(cls, directory: Path) -> DirWatch | None:
        """A watch of `directory`, or None where none can be set (not Linux, no
        directory, no inotify left): the caller's poll alone then finds its files."""
        found = _inotify()
        if found is None:
            return None
        inotify_class, moved_to, overflow = found
        try:
            inotify = inotify_class(nonblocking=True)
        except (OSError, AttributeError) as err:  # AttributeError: a libc without inotify
            log.debug("no inotify for %s: %s", directory, err)
            return None
        try:
            inotify.add_watch(directory, moved_to)
        except OSError as err:
            log.debug("no inotify watch of %s: %s", directory, err)
            inotify.close()
            return None
        return cls(inotify, overflow)

    async def wait(self, seconds: float) -> None:
        """Until a file arrives in the directory (or arrived since the last wait),
        or `seconds` pass; the events are taken, so the next wait waits again."""
        if self._closed:
            await trio.sleep(seconds)
            return
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
        return frozenset(event.name for event in events)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            with contextlib.suppress(RuntimeError):  # outside Trio: nobody waits on it
                trio.lowlevel.notify_closing(self._inotify.fileno())
            self._inotify.close()
