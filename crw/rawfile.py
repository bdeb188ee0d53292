"""Reading a whole file with the fewest syscalls: `read_bytes`.

`Path.read_bytes` and `read_text` go through Python's buffered I/O: an open, two
fstats, an ioctl (is it a terminal?), two lseeks, the read, a read that finds the
end, the close; nine syscalls a file. A session run reads two files a call in its
loop's thread, the dispatch report and the turn's rollout; `os.open` and `os.read`
until the end read the same bytes with four.
"""

from __future__ import annotations

import os
from pathlib import Path

CHUNK = 64 * 1024
"""Bytes asked for a read: a report or a short turn's rollout is one read."""


def read_bytes(path: Path | str) -> bytes:
    """The file's bytes, as `Path(path).read_bytes()` answers them.

    Raises:
        OSError: the file cannot be opened or read (FileNotFoundError when it is
            not there, IsADirectoryError for a directory).
    """
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        chunks: list[bytes] = []
        while chunk := os.read(fd, CHUNK):
            chunks.append(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks)


def read_stat(path: Path | str) -> tuple[bytes, os.stat_result]:
    """The file's bytes and its stat, from one open: an open, an fstat, a read
    and a close for a file that does not grow meanwhile (a regular file's
    short read is its end: a read of one byte more than its size says so).

    Raises:
        OSError: the file cannot be opened or read.
    """
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        stat = os.fstat(fd)
        return read_open(fd, stat.st_size), stat
    finally:
        os.close(fd)


def read_open(fd: int, size: int) -> bytes:
    """The bytes of the file open as `fd` from its offset, `size` the fstat's: one
    read for a file that does not grow meanwhile (a regular file's short read is
    its end: a read of one byte more than its size says so), more for one that did.

    Raises:
        OSError: the file cannot be read.
    """
    chunk = os.read(fd, size + 1)
    if len(chunk) <= size:
        return chunk
    chunks = [chunk]
    while chunk := os.read(fd, CHUNK):
        chunks.append(chunk)
    return b"".join(chunks)


def read_from(path: Path | str, offset: int) -> bytes:
    """The file's bytes from `offset` to its end, from one open: an open, the
    reads (the last finds the end) and a close.

    Raises:
        OSError: the file cannot be opened or read.
    """
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        chunks: list[bytes] = []
        while chunk := os.pread(fd, CHUNK, offset):
            chunks.append(chunk)
            offset += len(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks)
