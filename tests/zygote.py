"""`python -m crw ...` without the interpreter's and the imports' start-up: a
fork server that imported crw once, for `Crw.__call__` and crw's detached processes.

Most of the suite's CPU is the `crw` processes its tests start, each a fresh
process, and most of a process's CPU is its start: the interpreter and crw's imports
(pydantic's models, the workflow checks, cyclopts, pygit2, trio; docs/performance.md,
"Command start-up"). Each xdist worker starts one server (`python -m tests.zygote`)
on its first command; the server imports what the commands import and waits. For a
command it forks a child that takes the command's stdin, stdout and stderr (passed
as descriptors over a unix socket), its environment, its directory, its umask and
its argv, and runs `crw` as `python -m crw` does (`runpy`, `__main__`); the server
reports the child's pid, then its exit status as `subprocess` gives it (`-N` for a
signal). The command is still a process of its own, with its own exit code, streams
and environment: a test sees what it saw, in about a tenth of the CPU.

The detached processes crw starts (`crw.detach.start_crw`: a run's process, the
simulated host) are forked so too: `install` (tests/conftest.py) puts `start_crw`
in crw's place in the worker, and the server puts it in place in itself, so a `crw
flow start` it forked launches its run process forked from it as well. The child
is a session leader holding the descriptors the start hands it at their numbers
(a run's handed lock); the starter gets a `Forked`, read as a `subprocess.Popen`.

A child shows what a fresh process shows: `/proc/PID/cmdline` and `environ` read
as those of `python -m crw ARGS` exec'd with the command's environment (the kernel
is told where its argv and environment are, `_masquerade`), so a test that looks
for leftover processes by the directory they name finds them as it finds fresh
ones. It holds only the descriptors it was handed: the fork copies all of the
server's, its socket, its selector, the pidfds of its parent and children and the
connections of the commands in flight, and the child closes them (`_place`). Its
parent is the server, which reaps it.

What a fork cannot give a child is what the interpreter read from the environment
at its start: a command whose environment differs from the server's in a
`PYTHON*` variable, the locale (`LANG`, `LC_*`) or `TZ` runs cold, as does every
command when `CRW_TEST_COLD` is set (`Crw` falls back to `subprocess.run`, and
`start_crw` to crw's own, as they do when the server cannot be started, or the
kernel does not let a process set its argv's place).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import fcntl
import io
import json
import os
import runpy
import select
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from crw import detach

COLD = "CRW_TEST_COLD"
"""Set (to anything), `Crw` runs every command as a fresh process."""
_READ_AT_START = ("PYTHON", "LANG", "LC_", "TZ")
"""Variables the interpreter (or the C library) reads once, at its start."""
_PRELOAD = (
    "crw.cli",
    "crw.cli.app",
    "crw.cli.hot",
    "crw.actors.run",
    "crw.host.sim.server",
    "pygit2",
    "trio",
)
"""What the server imports before it forks: crw's command tree and what its
commands import most."""
_FDS = (0, 1, 2)
"""Where a command's descriptors go: its stdin, stdout and stderr."""
cold_start = detach.start_crw
"""crw's own start of a detached process: a fresh `python -m crw`."""
_serving: tuple[Path, dict[str, str]] | None = None
"""In the server (and so in what it forks), when it can fork a detached process:
its socket and its environment's variables read at start."""
_imported_fds: frozenset[int] = frozenset(_FDS)
"""The server's descriptors before it served: what it imported may hold one."""


def _read_at_start(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith(_READ_AT_START)}


def _child(asked: dict[str, Any], fds: list[int]) -> None:
    """In the forked child: become `python -m crw *argv` (as a fresh process shows
    it: its descriptors, argv, environment, directory, umask and session), then exit
    as it would."""
    code: object = 1
    try:
        _place(fds, asked.get("fds", _FDS))
        if "umask" in asked:  # the asking process's, as a child it spawned gets
            os.umask(asked["umask"])
        if asked.get("detached"):
            os.setsid()
        argv, env = asked["argv"], asked["env"]
        _std_streams()
        os.chdir(asked["cwd"])
        sys.path[0] = asked["cwd"]  # as `python -m` puts the working directory first
        os.environ.clear()
        os.environ.update(env)
        tempfile.tempdir = None  # TMPDIR is the command's
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        main = Path(sys.modules["crw"].__file__ or "").with_name("__main__.py")
        sys.orig_argv = [sys.executable, "-m", "crw", *argv]
        _masquerade(_exec_block(sys.orig_argv), _exec_block([f"{k}={v}" for k, v in env.items()]))
        sys.argv = [str(main), *argv]
        try:
            runpy.run_module("crw", run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as done:
            code = done.code
        threading._shutdown()  # type: ignore[attr-defined]  # as the interpreter's exit does
        atexit._run_exitfuncs()
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        if code is None:
            code = 0
        elif not isinstance(code, int):
            print(code, file=sys.stderr)
            code = 1
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code & 0xFF)


def _place(received: list[int], targets: Sequence[int]) -> None:
    """Each received descriptor at its number in the asking process (its stdin,
    stdout and stderr at 0-2), and every other the server holds closed: its socket
    and selector, the pidfds of its parent and children, the connections of the
    commands in flight (a fork copies them all, an exec of a fresh process closes
    them). Those of what the server imported stay, as a fresh process's imports
    make them."""
    above = max([*received, *targets, *_imported_fds]) + 1
    moved = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, above) for fd in received]
    keep = set(moved) | _imported_fds
    for name in os.listdir("/proc/self/fd"):
        if int(name) not in keep:
            with contextlib.suppress(OSError):  # the listing's own, closed already
                os.close(int(name))
    for fd, target in zip(moved, targets, strict=True):
        os.dup2(fd, target)
        os.close(fd)


class _MmMap(ctypes.Structure):
    """`struct prctl_mm_map` (linux/prctl.h)."""

    _fields_ = [
        *[(name, ctypes.c_uint64) for name in (
            "start_code", "end_code", "start_data", "end_data", "start_brk", "brk",
            "start_stack", "arg_start", "arg_end", "env_start", "env_end", "auxv",
        )],
        ("auxv_size", ctypes.c_uint32),
        ("exe_fd", ctypes.c_uint32),
    ]  # fmt: skip


_PR_SET_MM, _PR_SET_MM_MAP = 35, 14
_shown: list[Any] = []
"""The buffers /proc/self/cmdline and environ read, kept for the process's life."""


def _exec_block(items: Sequence[str]) -> bytes:
    """Strings as exec lays out argv or the environment: each ends with a NUL."""
    return b"".join(os.fsencode(item) + b"\0" for item in items)


def _masquerade(args: bytes, environ: bytes) -> bool:
    """This process's /proc/PID/cmdline and environ made to read `args` and
    `environ` (`_exec_block`), as they read for a process exec'd with them (`ps`, a
    test looking for a process by what it names); whether the kernel let it.
    PR_SET_MM_MAP, which a process may do to itself unprivileged (CRIU restores a
    process's so): the memory map's other bounds are given as they are."""
    arg_buf = ctypes.create_string_buffer(args, len(args))
    env_buf = ctypes.create_string_buffer(environ, max(len(environ), 1))
    with open("/proc/self/stat", "rb") as stat:
        after_state = stat.read().rsplit(b")", 1)[1].split()[1:]
    field = {n: int(value) for n, value in enumerate(after_state, start=4)}  # proc(5)'s numbers
    libc = ctypes.CDLL(None, use_errno=True)
    libc.sbrk.restype = ctypes.c_void_p
    libc.sbrk.argtypes = [ctypes.c_long]
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong,
                           ctypes.c_ulong]  # fmt: skip
    brk: int = libc.sbrk(0) or 0
    arg_at, env_at = ctypes.addressof(arg_buf), ctypes.addressof(env_buf)
    mm = _MmMap(
        start_code=field[26], end_code=field[27], start_data=field[45], end_data=field[46],
        start_brk=field[47], brk=brk, start_stack=field[28],
        arg_start=arg_at, arg_end=arg_at + len(args),
        env_start=env_at, env_end=env_at + len(environ),
        exe_fd=0xFFFFFFFF,  # -1: the executable stays
    )  # fmt: skip
    done: int = libc.prctl(_PR_SET_MM, _PR_SET_MM_MAP, ctypes.addressof(mm), ctypes.sizeof(mm), 0)
    if done == 0:
        _shown[:] = [arg_buf, env_buf]
    return done == 0


def _std_streams() -> None:
    """sys.stdin, stdout and stderr made again on descriptors 0-2, as the
    interpreter makes them at its start: the server's were made on other files
    (a wrapper remembers whether its file could seek)."""
    unbuffered = bool(os.environ.get("PYTHONUNBUFFERED"))  # the command's: the same
    for fd, name in enumerate(("stdin", "stdout", "stderr")):
        old = getattr(sys, name)
        if fd == 0:
            buffer: Any = open(fd, "rb", closefd=False)  # noqa: SIM115
        else:
            buffer = open(fd, "wb", buffering=0 if unbuffered else -1, closefd=False)  # noqa: SIM115
        tty = os.isatty(fd)
        made = io.TextIOWrapper(
            buffer,
            encoding=old.encoding,
            errors=old.errors,
            line_buffering=fd > 0 and not unbuffered and (tty or fd == 2),
            write_through=fd > 0 and unbuffered,
        )
        setattr(sys, name, made)
        setattr(sys, f"__{name}__", made)


def _serve(listening: socket.socket) -> None:
    """Fork a child for each command asked on a connection; report its pid, then
    its status. One thread: the children are watched by their pidfds, so commands
    run at once (a test's threads) each get theirs."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the worker's Ctrl-C is not ours
    selector = selectors.DefaultSelector()
    selector.register(listening, selectors.EVENT_READ)
    parent = os.pidfd_open(os.getppid())  # the worker: the server ends with it
    selector.register(parent, selectors.EVENT_READ)
    while True:
        for key, _ in selector.select():
            if key.fd == parent:  # its socket and directory go with it
                where = Path(listening.getsockname())
                with contextlib.suppress(OSError):
                    where.unlink()
                    where.parent.rmdir()
                os._exit(0)
            if key.fileobj is listening:
                conn, _ = listening.accept()
                pid = _fork(conn)
                if pid is None:
                    conn.close()
                    continue
                selector.register(os.pidfd_open(pid), selectors.EVENT_READ, (pid, conn))
            else:
                pid, conn = key.data
                selector.unregister(key.fd)
                os.close(key.fd)
                _, status = os.waitpid(pid, 0)
                code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
                with contextlib.suppress(OSError), conn:
                    conn.sendall(f"{code}\n".encode())


def _fork(conn: socket.socket) -> int | None:
    """The child for the command asked on `conn` (its pid sent back), or None. A
    process that asks and goes away (a hook or a shell command of a codex the test
    killed) ends neither the server nor its child."""
    try:
        message, fds, _, _ = socket.recv_fds(conn, 1 << 20, 64)
    except OSError:
        return None
    asked = json.loads(message) if message else {}
    if not message or len(fds) != len(asked.get("fds", _FDS)):
        for fd in fds:
            os.close(fd)
        return None
    pid = os.fork()
    if pid == 0:
        _child(asked, fds)
    for fd in fds:
        os.close(fd)
    with contextlib.suppress(OSError):  # its child runs on, watched until it ends
        conn.sendall(f"{pid}\n".encode())
    return pid


@dataclass
class Zygote:
    """A worker's fork server: its process and its socket."""

    process: subprocess.Popen[bytes]
    path: Path
    env: dict[str, str]
    detaches: bool
    """Whether it forks detached processes (`start_crw`): it can show each what a
    fresh one shows in /proc."""

    def run(
        self, argv: list[str], env: dict[str, str], cwd: Path, timeout: float
    ) -> subprocess.CompletedProcess[str] | None:
        """`python -m crw *argv` as `subprocess.run(..., capture_output=True,
        text=True, stdin=DEVNULL)` runs it; None when only a fresh process can."""
        if not self.takes(env):
            return None
        return ask(self.path, argv, env, cwd, timeout)

    def takes(self, env: dict[str, str]) -> bool:
        """Whether a command with `env` can be forked from this server."""
        return _read_at_start(env) == _read_at_start(self.env) and self.process.poll() is None

    def close(self) -> None:
        self.process.kill()
        self.process.wait()
        if self.process.stderr is not None:  # else it is "unclosed" at this process's exit
            self.process.stderr.close()
        with contextlib.suppress(OSError):
            self.path.parent.joinpath(self.path.name).unlink()
            self.path.parent.rmdir()


def ask(
    path: Path, argv: list[str], env: dict[str, str], cwd: Path, timeout: float
) -> subprocess.CompletedProcess[str]:
    """`python -m crw *argv` forked from the server at `path`: its exit code and
    output, as `subprocess.run` gives them (OSError: no server there)."""
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    null = os.open(os.devnull, os.O_RDONLY)
    conn = socket.socket(socket.AF_UNIX)
    try:
        conn.connect(str(path))
        umask = os.umask(0o077)
        os.umask(umask)
        asked = json.dumps({"argv": argv, "env": env, "cwd": str(cwd), "umask": umask}).encode()
        socket.send_fds(conn, [asked], [null, out_w, err_w])
    except OSError:
        conn.close()
        os.close(out_r)
        os.close(err_r)
        raise
    finally:
        for fd in (null, out_w, err_w):
            os.close(fd)
    with conn, conn.makefile("rb") as answers:
        pid = int(answers.readline())
        try:
            out, err = _drain(out_r, err_r, timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            raise subprocess.TimeoutExpired([sys.executable, "-m", "crw", *argv], timeout) from None
        code = int(answers.readline())
    return subprocess.CompletedProcess(argv, code, out, err)


def _drain(out_r: int, err_r: int, timeout: float) -> tuple[str, str]:
    """Both pipes read to their end (the command and whatever inherited them
    exited), as text."""
    chunks: dict[int, list[bytes]] = {out_r: [], err_r: []}
    deadline = _now() + timeout
    with selectors.DefaultSelector() as selector:
        for fd in chunks:
            selector.register(fd, selectors.EVENT_READ)
        try:
            while selector.get_map():
                left = deadline - _now()
                if left <= 0:
                    raise subprocess.TimeoutExpired("crw", timeout)
                for key, _ in selector.select(left):
                    data = os.read(key.fd, 1 << 16)
                    if data:
                        chunks[key.fd].append(data)
                    else:
                        selector.unregister(key.fd)
        finally:
            os.close(out_r)
            os.close(err_r)
    return tuple(_text(b"".join(chunks[fd])) for fd in (out_r, err_r))  # type: ignore[return-value]


def _text(data: bytes) -> str:
    """As `subprocess.run(text=True)` decodes (the locale's encoding, universal newlines)."""
    return io.TextIOWrapper(io.BytesIO(data)).read()


def _now() -> float:
    import time

    return time.monotonic()


def start(
    path: Path,
    args: Sequence[str],
    out: int | None,
    env: Mapping[str, str],
    cwd: str,
    pass_fds: Sequence[int] = (),
) -> Forked:
    """`python -m crw *args` detached, as `crw.detach.start_crw` starts it, forked
    from the server at `path` (OSError: no server there)."""
    null = os.open(os.devnull, os.O_RDWR)  # stdin, and the output when `out` is None
    output = null if out is None else out
    conn = socket.socket(socket.AF_UNIX)
    try:
        conn.connect(str(path))
        umask = os.umask(0o077)
        os.umask(umask)
        asked = {"argv": list(args), "env": dict(env), "cwd": cwd, "umask": umask,
                 "fds": [*_FDS, *pass_fds], "detached": True}  # fmt: skip
        socket.send_fds(conn, [json.dumps(asked).encode()], [null, output, output, *pass_fds])
        with conn.makefile("rb", buffering=0) as answers:
            pid = int(answers.readline())
    except (OSError, ValueError) as failed:
        conn.close()
        raise OSError(f"no detached process from {path}") from failed
    finally:
        os.close(null)
    return Forked([sys.executable, "-m", "crw", *args], pid, conn)


class Forked:
    """A detached process the server forked (`start`), read as `subprocess.Popen`
    reads a child: its pid, and its exit status once the server, its parent, sends
    it (-N for signal N)."""

    def __init__(self, args: list[str], pid: int, conn: socket.socket) -> None:
        self.args = args
        self.pid = pid
        self.returncode: int | None = None
        self._conn: socket.socket | None = conn
        self._answer = b""
        self._pidfd: int | None = None  # signalled through: never a pid used again
        with contextlib.suppress(ProcessLookupError):  # else it ended: the server says how
            self._pidfd = os.pidfd_open(pid)

    def poll(self) -> int | None:
        return self._status(0)

    def wait(self, timeout: float | None = None) -> int:
        code = self._status(timeout)
        if code is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        return code

    def send_signal(self, sig: int) -> None:
        if self.poll() is None and self._pidfd is not None:
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(self._pidfd, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def _status(self, timeout: float | None) -> int | None:
        """The exit status, waiting up to `timeout` seconds for it (None: no limit).
        A server that ended first (killed with its worker) leaves it unknown: 255
        once the process ended."""
        deadline = None if timeout is None else _now() + timeout
        while self.returncode is None and self._conn is not None:
            left = None if deadline is None else max(0.0, deadline - _now())
            ready, _, _ = select.select([self._conn], [], [], left)
            if not ready:
                return None
            data = self._conn.recv(64)
            self._answer += data
            if b"\n" in self._answer:
                self.returncode = int(self._answer.split(b"\n", 1)[0])
            elif not data:
                if self._pidfd is not None and not select.select([self._pidfd], [], [], left)[0]:
                    return None
                self.returncode = 255
        self._close()
        return self.returncode

    def _close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None

    def __del__(self) -> None:
        self._close()


def start_crw(
    args: Sequence[str],
    *,
    out: int | None,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    pass_fds: Sequence[int] = (),
) -> detach.Detached:
    """`crw.detach.start_crw` (`install`): the process forked from the server when
    it can (the worker's, or the one this process was forked from), else fresh."""
    env = dict(os.environ if env is None else env)
    path = _detaching(env)
    if path is not None:
        with contextlib.suppress(OSError):
            return start(path, args, out, env, cwd or os.getcwd(), pass_fds)
    return cold_start(args, out=out, env=env, cwd=cwd, pass_fds=pass_fds)


def _detaching(env: dict[str, str]) -> Path | None:
    """The socket of the server a detached process with `env` is forked from, or
    None: it must start fresh."""
    if _serving is not None:  # the server's child: the worker's `_started` is not here
        where, read = _serving
        return where if _read_at_start(env) == read else None
    server = zygote()
    return server.path if server is not None and server.detaches and server.takes(env) else None


def install() -> None:
    """crw's detached processes (a run's process, a simulated host) forked from this
    worker's server from now on, as `Crw`'s commands are; unless `CRW_TEST_COLD`."""
    if not os.environ.get(COLD):
        detach.start_crw = start_crw


_started: Zygote | None = None
_lock = threading.Lock()


def zygote() -> Zygote | None:
    """This process's fork server, started on first use with this process's
    environment less crw's and codex's variables, as `Crw` makes its commands'
    (None when `CRW_TEST_COLD` is set or it could not start)."""
    global _started
    if os.environ.get(COLD):
        return None
    with _lock:
        if _started is None or _started.process.poll() is not None:
            env = {k: v for k, v in os.environ.items() if not k.startswith(("CRW_", "CODEX_"))}
            _started = _start(env)
        return _started


def path_for(env: dict[str, str]) -> Path | None:
    """The socket of this process's server, for a process of its own (the drill's
    owner) whose commands run with `env`; None when they must run cold."""
    server = zygote()
    return server.path if server is not None and server.takes(env) else None


def run(
    argv: list[str], env: dict[str, str], cwd: Path, timeout: float
) -> subprocess.CompletedProcess[str]:
    """`python -m crw *argv` as `subprocess.run(..., stdin=DEVNULL,
    capture_output=True, text=True)` runs it: forked from the server when it can."""
    server = zygote()
    done = None if server is None else server.run(argv, env, cwd, timeout)
    if done is not None:
        return done
    return subprocess.run(
        [sys.executable, "-m", "crw", *argv],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
    )


def _open_fds() -> list[int]:
    """This process's descriptors (the listing's own left out)."""
    listed = [int(name) for name in os.listdir("/proc/self/fd")]
    return [fd for fd in listed if _is_open(fd)]


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def _start(env: dict[str, str]) -> Zygote | None:
    where = Path(tempfile.mkdtemp(prefix="crw-zygote-", dir="/tmp"))
    path = where / "s"
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.zygote", str(path)],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        cwd=Path(__file__).resolve().parents[1],
    )
    assert process.stderr is not None
    ready = process.stderr.readline()
    if ready not in (b"ready\n", b"ready detached\n"):
        process.kill()
        process.wait()
        process.stderr.close()
        return None
    made = Zygote(process, path, dict(env), ready == b"ready detached\n")
    atexit.register(made.close)
    return made


def main() -> None:
    global _imported_fds, _serving
    path = sys.argv[1]
    for name in _PRELOAD:
        __import__(name)
    _imported_fds = frozenset(_open_fds())
    shown = Path("/proc/self/cmdline").read_bytes(), Path("/proc/self/environ").read_bytes()
    detaches = _masquerade(*shown)  # as they are: whether a child can show its own
    if detaches:
        _serving = (Path(path), _read_at_start(dict(os.environ)))
        detach.start_crw = start_crw  # what a command it forks starts, it forks too
    listening = socket.socket(socket.AF_UNIX)
    listening.bind(path)
    listening.listen(64)
    os.write(2, b"ready detached\n" if detaches else b"ready\n")
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    os.close(devnull)
    _serve(listening)


if __name__ == "__main__":
    main()
