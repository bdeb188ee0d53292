"""`python -m crw ...` without the interpreter's and the imports' start-up: a
fork server that imported crw's command tree once, for `Crw.__call__`.

Most of the suite's CPU is the `crw` commands its tests run, each a fresh process,
and most of a command's CPU is its start: the interpreter and crw's imports
(pydantic's models, the workflow checks, cyclopts, pygit2, trio; docs/performance.md,
"Command start-up"). Each xdist worker starts one server (`python -m tests.zygote`)
on its first command; the server imports what the commands import and waits. For a
command it forks a child that takes the command's stdin, stdout and stderr (passed
as descriptors over a unix socket), its environment, its directory and its argv,
and runs `crw` as `python -m crw` does (`runpy`, `__main__`); the server reports
the child's pid, then its exit status as `subprocess` gives it (`-N` for a signal).
The command is still a process of its own, with its own exit code, streams and
environment: a test sees what it saw, in about a tenth of the CPU.

What a fork cannot give a child is what the interpreter read from the environment
at its start: a command whose environment differs from the server's in a
`PYTHON*` variable, the locale (`LANG`, `LC_*`) or `TZ` runs cold, as does every
command when `CRW_TEST_COLD` is set (`Crw` falls back to `subprocess.run`, as it
does when the server cannot be started). The environment the server's own
`/proc/PID/environ` shows is its own: a test that looks for leftover processes by
the directory their environment names finds a command's children (exec'd with
the command's environment), and the command by its working directory.
"""

from __future__ import annotations

import atexit
import contextlib
import io
import json
import os
import runpy
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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


def _read_at_start(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith(_READ_AT_START)}


def _child(argv: list[str], env: dict[str, str], cwd: str, fds: list[int]) -> None:
    """In the forked child: become `python -m crw *argv`, then exit as it would."""
    code: object = 1
    try:
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        _std_streams()
        os.chdir(cwd)
        sys.path[0] = cwd  # as `python -m` puts the working directory first
        os.environ.clear()
        os.environ.update(env)
        tempfile.tempdir = None  # TMPDIR is the command's
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        main = Path(sys.modules["crw"].__file__ or "").with_name("__main__.py")
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
                pid = _fork(listening, conn)
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


def _fork(listening: socket.socket, conn: socket.socket) -> int | None:
    """The child for the command asked on `conn` (its pid sent back), or None. A
    process that asks and goes away (a hook or a shell command of a codex the test
    killed) ends neither the server nor its child."""
    try:
        message, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
    except OSError:
        return None
    if not message or len(fds) != 3:
        for fd in fds:
            os.close(fd)
        return None
    asked = json.loads(message)
    pid = os.fork()
    if pid == 0:
        listening.close()
        conn.close()
        if "umask" in asked:  # the asking process's, as a child it spawned gets
            os.umask(asked["umask"])
        _child(asked["argv"], asked["env"], asked["cwd"], fds)
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
    if ready != b"ready\n":
        process.kill()
        process.wait()
        return None
    made = Zygote(process, path, dict(env))
    atexit.register(made.close)
    return made


def main() -> None:
    path = sys.argv[1]
    for name in _PRELOAD:
        __import__(name)
    listening = socket.socket(socket.AF_UNIX)
    listening.bind(path)
    listening.listen(64)
    os.write(2, b"ready\n")
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    os.close(devnull)
    _serve(listening)


if __name__ == "__main__":
    main()
