"""`crw host sim serve` without --codex-home makes a temporary home for its rollout
files and removes it however it stops but SIGKILL: SIGINT, SIGTERM, SIGHUP (its
terminal closed), a socket it cannot listen on; the SIGKILL of the shell that
started it does not stop it. Real `crw` processes; TMPDIR is the test's own."""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.deadlines import LOADED


@pytest.fixture
def started() -> Iterator[list[subprocess.Popen[bytes]]]:
    processes: list[subprocess.Popen[bytes]] = []
    yield processes
    for process in processes:
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=LOADED)


def _until(what: str, condition: object) -> None:
    deadline = time.monotonic() + LOADED
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


SERVE = [sys.executable, "-m", "crw", "host", "sim", "serve"]


def _env(tmpdir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CRW_", "CODEX_"))}
    return env | {"TMPDIR": str(tmpdir)}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with contextlib.suppress(OSError):  # a zombie no one reaps yet is gone as well
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] != "Z"
    return True


@pytest.mark.parametrize(
    "stop", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=["SIGINT", "SIGTERM", "SIGHUP"]
)
def test_a_signal_removes_its_temporary_home(
    tmp_path: Path, started: list[subprocess.Popen[bytes]], stop: signal.Signals
) -> None:
    tmpdir, out = tmp_path / "tmp", tmp_path / "serve.out"
    tmpdir.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CRW_", "CODEX_"))}
    with out.open("wb") as stdout:
        serve = subprocess.Popen(
            [sys.executable, "-m", "crw", "host", "sim", "serve", "--socket", "s.sock"],
            cwd=tmp_path,
            env=env | {"TMPDIR": str(tmpdir)},
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=subprocess.STDOUT,
        )
    started.append(serve)
    _until("it listens", lambda: b"listening on" in out.read_bytes())
    (home,) = tmpdir.glob("crw-sim-home-*")
    assert home.is_dir()
    serve.send_signal(stop)
    assert serve.wait(timeout=LOADED) == 0, out.read_text()
    assert list(tmpdir.iterdir()) == []


def test_a_home_it_is_given_is_kept(tmp_path: Path, started: list[subprocess.Popen[bytes]]) -> None:
    out, home = tmp_path / "serve.out", tmp_path / "home"
    with out.open("wb") as stdout:
        serve = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "crw",
                "host",
                "sim",
                "serve",
                "--socket",
                "s.sock",
                "--codex-home",
                str(home),
            ],
            cwd=tmp_path,
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=subprocess.STDOUT,
        )
    started.append(serve)
    _until("it listens", lambda: b"listening on" in out.read_bytes())
    serve.send_signal(signal.SIGTERM)
    assert serve.wait(timeout=LOADED) == 0, out.read_text()
    assert home.is_dir()


def test_a_socket_it_cannot_listen_on_leaves_no_home(tmp_path: Path) -> None:
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    failed = subprocess.run(
        [*SERVE, "--socket", str(tmp_path / "missing" / "s.sock")],
        env=_env(tmpdir),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=LOADED,
        check=False,
    )
    assert failed.returncode == 1 and b"cannot listen on unix:" in failed.stderr
    assert list(tmpdir.iterdir()) == []


def test_the_sigkill_of_its_parent_shell_leaves_it_serving_and_its_stop_removes_the_home(
    tmp_path: Path,
) -> None:
    tmpdir, out, pid_file = tmp_path / "tmp", tmp_path / "serve.out", tmp_path / "serve.pid"
    tmpdir.mkdir()
    command = " ".join(shlex.quote(word) for word in [*SERVE, "--socket", "s.sock"])
    shell = subprocess.Popen(
        ["bash", "-c", f"{command} >{shlex.quote(str(out))} 2>&1 & echo $! >serve.pid; wait"],
        cwd=tmp_path,
        env=_env(tmpdir),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    pid = 0
    try:
        _until("it listens", lambda: out.exists() and b"listening on" in out.read_bytes())
        pid = int(pid_file.read_text())
        shell.send_signal(signal.SIGKILL)
        shell.wait(timeout=LOADED)
        assert _alive(pid) and len(list(tmpdir.glob("crw-sim-home-*"))) == 1
        os.kill(pid, signal.SIGTERM)
        _until("it stops", lambda: not _alive(pid))
        assert list(tmpdir.iterdir()) == [], out.read_text()
    finally:
        if shell.poll() is None:
            shell.kill()
            shell.wait(timeout=LOADED)
        if pid and _alive(pid):
            os.kill(pid, signal.SIGKILL)
