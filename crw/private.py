"""What crw makes is the user's alone, whatever the umask: directories 0700, files 0600.

A process's umask only takes bits away, so a `mkdir` with 0700 or an `open` with
0600 is private under the usual umasks (022, 077, even 000); only a umask that
takes one of the user's own bits (0277, say) needs a chmod after, and
`umask_takes` says when. `make_dirs` is `mkdir -p` whose every new directory is
0700 (`Path.mkdir(parents=True)` makes the parents with the umask's mode: 0777
under umask 000). `open_file` opens or creates a file 0600. `loose` says why a
directory crw keeps its state in is open to others (one it did not make, or one
an older crw made with the umask's mode), for a warning.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import stat

PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600
"""The modes of every directory and file crw makes: the user's alone."""
USER_FILE = 0o666
"""The mode a file the user names (`--out FILE`) is opened with: the umask decides."""
OPEN_TO_OTHERS = stat.S_IWGRP | stat.S_IWOTH
"""The bits that make a directory crw keeps its state in loose: another user
could remove, rename or replace what is in it."""


@functools.cache
def umask_takes(mode: int) -> bool:
    """Whether the process's umask takes any bit of `mode` from a file it makes.

    Read once a process: an `os.open` with `PRIVATE_FILE` under a umask that
    leaves the user's bits (022, 077, 0) makes the file 0600 already, and its
    `fchmod` was one syscall of every file the run writes (four a session
    call). The umask is read from /proc (setting it to read it back would race
    with the process's other threads' files); where /proc does not say, every
    file is chmodded, as before. A process that narrows its umask after its
    first file would leave files that are not 0600: crw never sets one.
    """
    try:
        with open("/proc/self/status", "rb") as status:
            for line in status:
                if line.startswith(b"Umask:"):
                    return bool(int(line.split()[1], 8) & mode)
    except (OSError, ValueError, IndexError):
        pass
    return True


def make_dirs(path: str | os.PathLike[str]) -> None:
    """Make the directory `path` and its missing parents, each 0700; one already
    there (another process may make it meanwhile) is left as it is.

    Raises:
        OSError: one cannot be made; FileExistsError when `path` or a parent is
            there and is no directory, NotADirectoryError when one of its parents
            is a file, as `Path.mkdir(parents=True, exist_ok=True)`.
    """
    missing = []
    directory = os.path.abspath(path)
    while not os.path.lexists(directory) and os.path.dirname(directory) != directory:
        missing.append(directory)
        directory = os.path.dirname(directory)
    if not missing and not os.path.isdir(directory):
        raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), directory)
    for made in reversed(missing):  # under a file, the first mkdir fails ENOTDIR
        try:
            os.mkdir(made, PRIVATE_DIR)
        except FileExistsError:
            if os.path.isdir(made):
                continue
            raise
        if umask_takes(PRIVATE_DIR):
            os.chmod(made, PRIVATE_DIR)


def open_file(path: str | os.PathLike[str], flags: int) -> int:
    """`os.open(path, flags | O_CREAT | O_CLOEXEC)` on a file made 0600 if it is
    made; a file already there keeps its mode.

    Raises:
        OSError: as `os.open`.
    """
    try:
        fd = os.open(path, flags | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, PRIVATE_FILE)
    except FileExistsError:
        return os.open(path, flags | os.O_CLOEXEC)
    if umask_takes(PRIVATE_FILE):
        os.fchmod(fd, PRIVATE_FILE)
    return fd


def loose(what: str, path: str | os.PathLike[str]) -> str | None:
    """Why `what`, the directory `path`, is open to others (group or others may
    write it), with its mode and the command that makes it private; None when it
    is not, or is not there."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    if not stat.S_ISDIR(mode) or not mode & OPEN_TO_OTHERS:
        return None
    return (
        f"{what} {path} is writable by group or others (mode {mode & 0o7777:o}): another user "
        f"could remove or replace what crw keeps there; make it private with: chmod 700 {path}"
    )


def write_atomic(
    path: str | os.PathLike[str],
    data: bytes,
    temp: str | os.PathLike[str] | None = None,
    *,
    durable: bool = True,
    private: bool = True,
) -> None:
    """Write `data` to `path` atomically: the temporary name `temp` in the same
    directory (default `.<name>.tmp`), private to the user (0600 whatever the
    umask: chmodded when the umask takes a bit of 0600), fsync, rename, fsync the
    directory. With `durable` False neither fsync is made: a reader sees the whole
    file or none, and a power loss may take it. With `private` False the file
    gets the mode any file the user makes gets (0666 less the umask): a file the
    user asked for by name, not one of crw's own. The paths are joined as strings
    (a session call writes four files: no path object is built for them).

    Raises:
        OSError: the write failed, its `filename` the file it was writing (also
            for a write or fsync, which name none); neither `temp` nor a partial
            `path` is left.
    """
    path = os.fspath(path)
    directory, name = os.path.split(path)
    temp = os.fspath(temp) if temp is not None else os.path.join(directory, f".{name}.tmp")
    try:
        flags, mode = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, PRIVATE_FILE
        if not private:  # a temporary file left behind would keep its mode: made anew
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temp)
            flags, mode = flags | os.O_EXCL, USER_FILE
        fd = os.open(temp, flags, mode)
        try:
            if private and umask_takes(PRIVATE_FILE):  # else the open made it 0600 already
                os.fchmod(fd, PRIVATE_FILE)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temp, path)
    except BaseException as err:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        if isinstance(err, OSError) and err.filename is None:
            err.filename = temp
        raise
    if durable:
        fsync_dir(directory)


def fsync_dir(directory: str | os.PathLike[str]) -> None:
    """Make a rename or a new entry in `directory` durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
