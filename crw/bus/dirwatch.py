"""A wake for files that arrive in one directory (Linux inotify), so a reader
that polls the directory learns of a new file at once instead of at its next poll.

It only shortens a wait: the reader still lists the directory (the wake carries no
name it trusts) and still polls, so a platform without inotify, a watch that
could not be set, or events lost to an overflow cost the poll's delay, never a
file. A wake is a file renamed into the directory (`IN_MOVED_TO`): the bus's
atomic writes make their files so (a temporary name first), and a wake at the
temporary file's close would find nothing to read yet.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import logging
import os
import sys
from pathlib import Path

import trio

log = logging.getLogger("crw.bus")

_IN_MOVED_TO = 0x00000080
_IN_NONBLOCK = os.O_NONBLOCK
_IN_CLOEXEC = os.O_CLOEXEC
_READ = 4096


def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.inotify_init1.argtypes = [ctypes.c_int]
        libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
    except (OSError, AttributeError):
        return None
    return libc


class DirWatch:
    """An inotify descriptor watching one directory for files that arrive."""

    def __init__(self, fd: int) -> None:
        self._fd: int | None = fd

    @classmethod
    def open(cls, directory: Path) -> DirWatch | None:
        """A watch of `directory`, or None where none can be set (not Linux, no
        directory, no inotify left): the caller's poll alone then finds its files."""
        libc = _libc()
        if libc is None:
            return None
        fd = libc.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC)
        if fd < 0:
            log.debug("no inotify for %s: errno %d", directory, ctypes.get_errno())
            return None
        if libc.inotify_add_watch(fd, os.fsencode(directory), _IN_MOVED_TO) < 0:
            log.debug("no inotify watch of %s: errno %d", directory, ctypes.get_errno())
            os.close(fd)
            return None
        return cls(fd)

    async def wait(self, seconds: float) -> None:
        """Until a file arrives in the directory (or arrived since the last wait),
        or `seconds` pass; the events are taken, so the next wait waits again."""
        if self._fd is None:
            await trio.sleep(seconds)
            return
        with trio.move_on_after(seconds):
            await trio.lowlevel.wait_readable(self._fd)
        self._drain()

    def _drain(self) -> None:
        while self._fd is not None:
            try:
                if len(os.read(self._fd, _READ)) < _READ:
                    return
            except BlockingIOError:
                return

    def close(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            with contextlib.suppress(RuntimeError):  # outside Trio: nobody waits on it
                trio.lowlevel.notify_closing(fd)
            os.close(fd)
