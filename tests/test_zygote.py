"""A command forked from the worker's server (tests/zygote.py) is what the same
command run as a fresh `python -m crw` process is: its exit code, its stdout and
stderr; its environment and working directory are the caller's. A detached process
forked so (a simulated host, a run's process) shows in /proc what a fresh one
shows, and holds the descriptors a fresh one holds. With `CRW_TEST_COLD` set
there is no server: skipped."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from crw import detach
from crw.engine.run.locks import is_held
from tests import zygote
from tests.deadlines import LOADED
from tests.processes import processes_naming, reap_naming

EXAMPLES = Path(__file__).resolve().parents[1] / "crw" / "examples"

COMMANDS = [
    ["flow", "status", "nope", "--json"],
    ["flow", "validate", "/nonexistent/workflow.toml"],
    ["flow", "start", "--bogus"],
    ["flow", "--help"],
    ["flow", "list", "--json"],
]


@pytest.fixture
def server() -> zygote.Zygote:
    """The worker's fork server (none with `CRW_TEST_COLD` set: skipped)."""
    if os.environ.get(zygote.COLD):
        pytest.skip(f"{zygote.COLD} is set: no fork server")
    started = zygote.zygote()
    assert started is not None, "the fork server did not start"
    return started


def cold(argv: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "crw", *argv],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
    )


def env_in(tmp_path: Path) -> dict[str, str]:
    plain = {k: v for k, v in os.environ.items() if not k.startswith(("CRW_", "CODEX_"))}
    return plain | {"TMPDIR": str(tmp_path), "CRW_STATE": str(tmp_path / "state")}


@pytest.mark.parametrize("argv", COMMANDS, ids=[" ".join(a[:2]) for a in COMMANDS])
def test_a_forked_command_answers_as_a_fresh_process(
    server: zygote.Zygote, tmp_path: Path, argv: list[str]
) -> None:
    env = env_in(tmp_path)
    forked = server.run(argv, env, tmp_path, 60)
    assert forked is not None
    fresh = cold(argv, env, tmp_path)
    assert (forked.returncode, forked.stdout, forked.stderr) == (
        fresh.returncode,
        fresh.stdout,
        fresh.stderr,
    )


def test_a_forked_command_has_the_callers_environment_and_directory(
    server: zygote.Zygote, tmp_path: Path
) -> None:
    """The state directory a command names is `CRW_STATE` when the environment
    sets it, else `.crw` in its working directory."""
    env = env_in(tmp_path)
    named = server.run(["flow", "status", "nope", "--json"], env, tmp_path, 60)
    assert named is not None and str(tmp_path / "state" / "flow") in named.stdout
    del env["CRW_STATE"]
    (tmp_path / "here").mkdir()
    here = server.run(["flow", "status", "nope", "--json"], env, tmp_path / "here", 60)
    assert here is not None and str(tmp_path / "here" / ".crw" / "flow") in here.stdout


def test_a_caller_whose_interpreter_settings_differ_runs_cold(
    server: zygote.Zygote, tmp_path: Path
) -> None:
    env = env_in(tmp_path) | {"PYTHONIOENCODING": "latin-1"}
    assert not server.takes(env)
    assert server.run(["flow", "--help"], env, tmp_path, 60) is None


@pytest.fixture
def short() -> Iterator[Path]:
    """A directory for unix sockets, short enough for their 108 bytes."""
    with tempfile.TemporaryDirectory(prefix="crw-sock-", dir="/tmp") as made:
        yield Path(made)


def serve_args(socket: Path) -> list[str]:
    return ["host", "sim", "serve", "--socket", str(socket), "--codex-home", f"{socket}.home"]


def listening(socket: Path) -> bool:
    """Whether a unix socket listens at `socket`, read from /proc/net/unix: a probe
    connection would be one more descriptor in the server for a moment."""
    for line in Path("/proc/net/unix").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[-1] == str(socket) and int(fields[3], 16) & 0x10000:  # __SO_ACCEPTCON
            return True
    return False


def wait_until(what: str, done: Callable[[], bool]) -> None:
    deadline = time.monotonic() + LOADED
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.02)


def descriptors(pid: int, names: dict[str, str]) -> dict[int, str]:
    """Each descriptor of `pid` and what it is: a path (each of `names` in it put as
    its value), or a kind (`socket`, `pipe`, `anon_inode:[eventpoll]`,
    `anon_inode:[pidfd]`) without its inode."""
    held = {}
    for entry in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(FileNotFoundError):
            what = re.sub(r":\[\d+\]$", "", os.readlink(entry))
            for name, put in names.items():
                what = what.replace(name, put)
            held[int(entry.name)] = what
    return held


def same_descriptors(forked: int, fresh: int, names: dict[str, str]) -> None:
    """`forked` holds the descriptors `fresh` holds, once neither holds one for a
    moment only (a probe's socket): one the fork kept would stay."""
    deadline = time.monotonic() + LOADED
    while descriptors(forked, names) != descriptors(fresh, names):
        if time.monotonic() > deadline:
            assert descriptors(forked, names) == descriptors(fresh, names)
        time.sleep(0.1)


def shown(pid: int) -> dict[str, Any]:
    """What a test or `ps` reads of process `pid` in /proc."""
    proc = Path(f"/proc/{pid}")
    stat = (proc / "stat").read_text().rsplit(")", 1)[1].split()
    status = dict(line.split(":\t", 1) for line in (proc / "status").read_text().splitlines())
    return {
        "cmdline": (proc / "cmdline").read_bytes().split(b"\0")[:-1],
        "environ": (proc / "environ").read_bytes().split(b"\0")[:-1],
        "cwd": os.readlink(proc / "cwd"),
        "session leader": stat[3] == stat[2] == str(pid),  # its session and group are its own
        "terminal": stat[4],
        "umask": status["Umask"],
        "signals": {key: status[key] for key in ("SigBlk", "SigIgn")},
    }


def test_a_detached_process_is_what_a_fresh_one_is(
    server: zygote.Zygote, tmp_path: Path, short: Path
) -> None:
    """`crw.detach.start_crw` forked from the server (a simulated host here) is the
    process a fresh one is: its argv and environment in /proc, its directory, its own
    session without a terminal, its umask, its signals, and its descriptors, even
    with another process of the server's in flight when it is forked (the server's
    socket, selector, pidfds and that process's connection are not its); its exit
    status reads as a fresh one's."""
    if not server.detaches:
        pytest.skip("the kernel does not let a process say where its argv is")
    env = env_in(tmp_path)
    (tmp_path / "in").mkdir()
    started: list[detach.Detached] = []
    try:
        for name in ("busy", "forked"):  # the first is in flight at the second's fork
            started.append(zygote.start(server.path, serve_args(short / name), None, env,
                                        str(tmp_path / "in")))  # fmt: skip
        fresh = zygote.cold_start(serve_args(short / "fresh"), out=None, env=env,
                                   cwd=str(tmp_path / "in"))  # fmt: skip
        started.append(fresh)
        forked = started[1]
        assert isinstance(forked, zygote.Forked) and not isinstance(fresh, zygote.Forked)
        wait_until("both listen", lambda: all(listening(short / n) for n in ("forked", "fresh")))
        environ = [f"{key}={value}".encode() for key, value in env.items()]
        for process, name in (forked, "forked"), (fresh, "fresh"):
            argv = [sys.executable, "-m", "crw", *serve_args(short / name)]
            assert shown(process.pid)["cmdline"] == [os.fsencode(arg) for arg in argv]
            assert shown(process.pid)["environ"] == environ
        assert {**shown(forked.pid), "cmdline": None} == {**shown(fresh.pid), "cmdline": None}
        same_descriptors(forked.pid, fresh.pid, {})
        forked.send_signal(signal.SIGTERM)
        fresh.send_signal(signal.SIGTERM)
        assert forked.wait(timeout=LOADED) == fresh.wait(timeout=LOADED)
        assert forked.poll() == forked.returncode
    finally:
        for process in started:
            process.kill()
            process.wait(timeout=LOADED)


def test_a_run_process_a_forked_start_launches_is_forked_and_seen_as_a_fresh_one(
    server: zygote.Zygote, tmp_path: Path
) -> None:
    """`crw flow start` forked from the server launches its run process forked from
    it too; that process (waiting for its host, here) shows what the run process of
    a fresh `crw flow start` shows, is found by the state directory it names, and
    is reaped so."""
    if not server.detaches:
        pytest.skip("the kernel does not let a process say where its argv is")
    env = env_in(tmp_path) | {"CODEX_HOME": str(tmp_path / "codex-home")}  # no host there
    state = tmp_path / "state"
    start = ["flow", "start", str(EXAMPLES / "fix-issue.toml"), "--state", str(state), "--json"]
    try:
        pids = {}
        for how, run in ("forked", server.run), ("fresh", None):
            argv = [*start, "--owner", how]
            done = run(argv, env, tmp_path, 60) if run else cold(argv, env, tmp_path)
            assert done is not None and done.returncode == 0, done and done.stderr
            pids[how] = json.loads(done.stdout)
        runs = {how: out["run"] for how, out in pids.items()}
        forked, fresh = pids["forked"]["pid"], pids["fresh"]["pid"]
        assert parent(forked) == server.process.pid and parent(fresh) != server.process.pid
        wait_until("both wait for their host", lambda: all(
            is_held(state / "flow" / run / "host_wait.lock") for run in runs.values()
        ))  # fmt: skip
        seen = {how: shown(pid) for how, pid in (("forked", forked), ("fresh", fresh))}
        for how, what in seen.items():
            argv = [sys.executable, "-m", "crw", "flow", "_run", runs[how], "--state", str(state)]
            assert what.pop("cmdline") == [os.fsencode(arg) for arg in argv]
        assert seen["forked"] == seen["fresh"]
        same_descriptors(forked, fresh, {runs["forked"]: "RUN", runs["fresh"]: "RUN"})
        assert {forked, fresh} <= set(processes_naming(state))
    finally:
        reap_naming(state)
    assert not processes_naming(state)


def parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def test_a_caller_gone_before_its_answer_leaves_the_server_serving(tmp_path: Path) -> None:
    """A process that asks for a command and goes away before the server answers
    (a hook or a shell command of a codex the test killed): the server answers the
    next caller (it died of the broken pipe, and the next test's command found its
    socket refusing)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CRW_", "CODEX_"))}
    server = zygote._start(env)
    assert server is not None
    try:
        for _ in range(5):
            with socket.socket(socket.AF_UNIX) as conn:
                conn.connect(str(server.path))
                null = os.open(os.devnull, os.O_RDWR)
                asked = {"argv": ["--version"], "env": env, "cwd": str(tmp_path)}
                socket.send_fds(conn, [json.dumps(asked).encode()], [null, null, null])
                os.close(null)
        done = zygote.ask(server.path, ["--version"], env, tmp_path, 60)
    finally:
        server.close()

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip()


def test_a_closed_server_leaves_no_pipe_of_its_own_open() -> None:
    """A server's close kills it, reaps it and closes the pipe its `ready` came on:
    left open, the pipe was an "unclosed file" ResourceWarning at the exit of each
    process that started a server (the suite's controller printed one a run)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CRW_", "CODEX_"))}
    server = zygote._start(env)
    assert server is not None and server.process.stderr is not None
    server.close()
    assert server.process.returncode is not None
    assert server.process.stderr.closed
