"""Where ext4 puts the inodes of a run's many small files: spread, not piled up.

A session call makes a directory under `steps/` and one under `calls/`, and four
files (its packet, step file, reply and close step), and the run removes two of
them again within milliseconds (the bound step's file, the answered report).
ext4 puts a new file's inode in its directory's block group, and a new
subdirectory in its parent's, so every call's churn lands in one group. On ext4
without a journal (this project's machines) making an inode skips every inode
of that group freed in the last 30 s (`recently_deleted` in fs/ext4/ialloc.c):
each file the run makes costs more the more calls went before (perf of the run
process of bench/scale.py's session run, 1,000 calls: 13.5% of its CPU under
`ext4_create` and `ext4_mkdir`, nearly all of it in `recently_deleted`).

The directory flag `FS_TOPDIR_FL` (`chattr +T`) asks ext4's Orlov allocator to
treat a directory as the top of a hierarchy: each subdirectory made in it goes to
a block group with more free inodes than most and few directories, so the calls'
directories, and the files in them, are spread over the file system's groups
instead of piling their freed inodes into one. It moves no data and changes no
name, mode or content; a file system without it refuses the ioctl, which is
ignored.
"""

from __future__ import annotations

import array
import fcntl
import os

FS_IOC_GETFLAGS = 0x80086601
FS_IOC_SETFLAGS = 0x40086602
FS_TOPDIR_FL = 0x00020000


def spread_subdirectories(directory: str | os.PathLike[str]) -> bool:
    """Set `FS_TOPDIR_FL` on `directory` (its later subdirectories are spread over
    the block groups); whether it is set. A file system that has no such flag, or
    a directory the process may not flag, is left as it is."""
    return _topdir(directory, set_it=True)


def spreads_subdirectories(directory: str | os.PathLike[str]) -> bool:
    """Whether `directory` has `FS_TOPDIR_FL` (False where it cannot be read)."""
    return _topdir(directory, set_it=False)


def _topdir(directory: str | os.PathLike[str], *, set_it: bool) -> bool:
    """Whether `directory` has `FS_TOPDIR_FL`, once set when `set_it`; False where
    its flags cannot be read or set."""
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        flags = array.array("i", [0])
        fcntl.ioctl(fd, FS_IOC_GETFLAGS, flags, True)
        if set_it and not flags[0] & FS_TOPDIR_FL:
            flags[0] |= FS_TOPDIR_FL
            fcntl.ioctl(fd, FS_IOC_SETFLAGS, flags, True)
        return bool(flags[0] & FS_TOPDIR_FL)
    except OSError:
        return False
    finally:
        os.close(fd)
