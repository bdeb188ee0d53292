"""The run's locks: the process lock, the run lock and the start lock (filelock, flock).

- The process lock `process.<token>.lock` is one process's own: a fresh token each
  time, taken from before the run lock until after it is let go (BIND-LINE-15). The
  process removes its file when it ends; the file of a process that died stays,
  held by nobody, since the kernel drops a dead process's flock (BIND-LINE-17).
- The run lock `run.lock` is held by the run's process, and for a moment by a
  command that writes a row. The start lock `start.lock` is held by `crw flow
  start` from before it binds the owner until the run's process holds the run lock.
- The launch lock `launch.lock` is held by a command that launches the run's
  process detached (`next`, `resume --detach`) from before it decides to launch
  until that process holds the run lock: one launch at a time, and a `next` that
  meets it answers the run starting instead of launching another.
- A run is live when its run lock or its start lock is held (BIND-LINE-20).

The start and launch locks are handed to the process they launch: the launcher
takes the flock on a descriptor the child inherits (`HandedLock`, named to the
child in `HANDED_ENV`), so the lock stays held when the launcher exits or gives up
waiting, and goes when the child lets it go (`hold_run`, once it holds the run
lock) or dies. A flock belongs to the open file description both share, so the
launcher only closes its descriptor, never unlocks it.

filelock's `UnixFileLock` leaves the file in place on release (unlinking a path
others wait on would split them across inodes). That is what the run and start
locks want. The process lock's file is unlinked by its holder while it still holds
the flock, and only then released: a reader that opens the path after the unlink
finds no file, and one that opened it before finds it held until the release.

A holder writes its pid into the lock file when it takes the lock, so a refusal can
name the process that holds the run.

The queries open an existing lock file and try a shared, non-blocking flock on it;
they never create a file. A query holds that flock for microseconds, which a
non-blocking take could meet, so a take polls for `TAKE_GRACE` before it gives up.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import time
from collections.abc import Iterator, MutableMapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

from crw.engine.run.rundir import RunDir
from crw.errors import RefusedError
from crw.private import PRIVATE_FILE, open_file

if TYPE_CHECKING:
    # filelock is imported where a lock is taken: the queries (is_held,
    # run_is_live) need only fcntl, and next and status start cold.
    from filelock import UnixFileLock

log = logging.getLogger("crw.locks")

HANDED_ENV = "CRW_HANDED_LOCKS"
"""The variable naming the descriptors of the locks a launcher handed the run's process."""
TAKE_GRACE = 0.25
"""Seconds a take of a held lock keeps trying, to ride out another command's probe."""

_POLL = 0.01
_PROCESS_PREFIX = "process."
_LOCK_SUFFIX = ".lock"


class RunHeldError(RefusedError):
    """The run lock or start lock is held by another process."""


def _write_pid(fd: int) -> None:
    # filelock's on_acquired hook: runs with the flock held, on the lock's descriptor.
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)


def _new_lock(path: Path) -> UnixFileLock:
    from filelock import UnixFileLock

    return UnixFileLock(
        path,
        thread_local=False,
        timeout=TAKE_GRACE,
        poll_interval=_POLL,
        fallback_to_soft=False,
        on_acquired=_write_pid,
        mode=PRIVATE_FILE,  # without it, 0o666 less the umask; with it, fchmodded once made
    )


def _new_token() -> str:
    return os.urandom(8).hex()  # as secrets.token_hex(8), without its import (hmac, OpenSSL)


class ProcessLock:
    """A process's own lock `process.<token>.lock`, held until `release`."""

    def __init__(self, path: Path, token: str, lock: UnixFileLock) -> None:
        self.path = path
        self.token = token
        self._lock = lock

    def release(self) -> None:
        """Remove the lock file, then let the lock go. A second call does nothing."""
        if not self._lock.is_locked:
            return
        try:
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()
        except OSError as err:
            log.warning("cannot remove process lock %s: %s", self.path, err)
        finally:
            self._lock.release()


def take_process_lock(run: RunDir) -> ProcessLock | None:
    """Take a fresh process lock of `run`, or None (with a warning) when it cannot be taken.

    The process then runs with a started row that names no process (BIND-LINE-18).
    """
    token = _new_token()
    path = run.process_lock(token)
    from filelock import Timeout

    lock = _new_lock(path)
    try:
        lock.acquire()
    except (Timeout, OSError) as err:
        reason = (
            f"not taken within {TAKE_GRACE} s"
            if isinstance(err, Timeout)
            else (err.strerror or str(err))
        )
        log.warning(
            "cannot take process lock %s (%s); the run goes on and its started row "
            "names no process",
            path,
            reason,
        )
        return None
    return ProcessLock(path, token, lock)


class RunLock:
    """A held run lock or start lock; a context manager that lets it go on exit."""

    def __init__(self, path: Path, lock: UnixFileLock) -> None:
        self.path = path
        self._lock = lock

    def release(self) -> None:
        """Let the lock go (the file stays). A second call does nothing."""
        if self._lock.is_locked:
            self._lock.release()

    def __enter__(self) -> RunLock:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()


class HandedLock:
    """A start or launch lock held on a descriptor of its own, which the launched
    process inherits (`fd`). `close` lets go of this process's descriptor only: the
    lock stays held while the child holds its copy, and goes with the last one."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self.fd = fd
        self._open = True

    def name_holder(self, pid: int) -> None:
        """Write `pid`, the process the lock is handed to, into the lock file."""
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, f"{pid}\n".encode(), 0)

    def close(self) -> None:
        """Close this process's descriptor (never unlock: the child may hold it)."""
        if self._open:
            self._open = False
            os.close(self.fd)

    def __enter__(self) -> HandedLock:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def launch_lock_path(run: RunDir) -> Path:
    return run.root / "launch.lock"


def start_lock(run: RunDir) -> HandedLock:
    """Take the start lock of `run`, to hand to the run's process.

    Raises:
        RunHeldError: another start holds it.
        RefusedError: the lock file cannot be opened.
    """
    return _take_handed(run, run.start_lock, "is being started by another process")


def launch_lock(run: RunDir) -> HandedLock:
    """Take the launch lock of `run`, to hand to the process a launch starts.

    Raises:
        RunHeldError: another command is launching the run's process.
        RefusedError: the lock file cannot be opened.
    """
    return _take_handed(run, launch_lock_path(run), "is being launched by another command")


def _take_handed(run: RunDir, path: Path, held: str) -> HandedLock:
    try:
        fd = open_file(path, os.O_RDWR | os.O_NOFOLLOW)
    except OSError as err:
        raise RefusedError(
            f"cannot take lock {path}: {err.strerror or err}; make the run directory writable"
        ) from err
    deadline = time.monotonic() + TAKE_GRACE
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() >= deadline:
                os.close(fd)
                pid = holder_pid(path)
                by = f" (pid {pid})" if pid is not None else ""
                raise RunHeldError(
                    f"run {run.id} {held}{by}; see its state with: crw flow next {run.id}"
                ) from None
            time.sleep(_POLL)
    _write_pid(fd)
    return HandedLock(path, fd)


def handed_env(handed: Sequence[HandedLock]) -> dict[str, str]:
    """The variable that names the handed locks' descriptors to the child."""
    return {HANDED_ENV: ",".join(str(lock.fd) for lock in handed)}


def let_go_handed(run: RunDir, environ: MutableMapping[str, str]) -> None:
    """In the run's process, once it holds the run lock: let go of the start and
    launch locks its launcher handed it (and forget the variable, so no process it
    starts sees it). A descriptor that is not one of these locks is left alone."""
    named = environ.pop(HANDED_ENV, "")
    ours = {_identity(path) for path in (run.start_lock, launch_lock_path(run))}
    for part in named.split(","):
        if not part.isdigit():
            continue
        fd = int(part)
        try:
            stat = os.fstat(fd)
        except OSError:
            continue
        if (stat.st_dev, stat.st_ino) in ours:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        stat = path.stat()
    except OSError:
        return None
    return stat.st_dev, stat.st_ino


def run_lock(run: RunDir) -> RunLock:
    """Take the run lock of `run`.

    Raises:
        RunHeldError: another process holds it.
        RefusedError: the lock file cannot be opened.
    """
    return _take(run, run.run_lock, "is held by another process")


def _take(run: RunDir, path: Path, held: str) -> RunLock:
    from filelock import Timeout

    lock = _new_lock(path)
    try:
        lock.acquire()
    except Timeout:
        pid = holder_pid(path)
        by = f" (pid {pid})" if pid is not None else ""
        raise RunHeldError(
            f"run {run.id} {held}{by}; see its state with: crw flow next {run.id}"
        ) from None
    except OSError as err:
        raise RefusedError(
            f"cannot take lock {path}: {err.strerror or err}; make the run directory writable"
        ) from err
    return RunLock(path, lock)


@contextlib.contextmanager
def hold_run(run: RunDir) -> Iterator[ProcessLock | None]:
    """Hold the process lock and, inside it, the run lock (BIND-LINE-15); then let
    go of the start or launch lock the launcher handed this process (BIND-LINE-19).

    Yields the process lock, or None when it could not be taken.

    Raises:
        RunHeldError: another process holds the run lock (the process lock is let go).
    """
    process = take_process_lock(run)
    try:
        with run_lock(run):
            let_go_handed(run, os.environ)
            yield process
    finally:
        if process is not None:
            process.release()


def is_held(path: Path) -> bool:
    """Whether some process holds the lock `path`. A missing file is not held.

    Opens the file only if it exists, and holds a shared flock on it for a moment.

    Raises:
        RefusedError: the file exists and cannot be opened.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    except OSError as err:
        raise RefusedError(
            f"cannot read lock {path}: {err.strerror or err}; check the run directory's permissions"
        ) from err
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError as err:
        if err.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            return True
        raise RefusedError(
            f"cannot test lock {path}: {err.strerror or err}; the run directory needs flock"
        ) from err
    finally:
        os.close(fd)  # closing the descriptor also drops the probe's flock
    return False


def holder_pid(path: Path) -> int | None:
    """The pid the lock's last holder wrote into `path`, if it can be read."""
    try:
        text = path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return int(text) if text.isdigit() else None


def held_process_tokens(run: RunDir) -> list[str]:
    """The tokens of the process locks of `run` that a process holds, sorted."""
    tokens = []
    for path in run.root.glob(f"{_PROCESS_PREFIX}*{_LOCK_SUFFIX}"):
        token = path.name[len(_PROCESS_PREFIX) : -len(_LOCK_SUFFIX)]
        if token and is_held(path):
            tokens.append(token)
    return sorted(tokens)


def is_launching(run: RunDir) -> bool:
    """Whether a launch of the run's process is under way: its launch lock is held."""
    return is_held(launch_lock_path(run))


def run_is_live(run: RunDir) -> bool:
    """Whether `run` is live: its run lock or its start lock is held (BIND-LINE-20).
    The start lock is asked first: the run's process lets it go only once it
    holds the run lock, so a run coming up is never read as held by neither."""
    return is_held(run.start_lock) or is_held(run.run_lock)
