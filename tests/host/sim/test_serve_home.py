"""`crw host sim serve` without --codex-home makes a temporary home for its rollout
files and removes it when a signal stops it. Real `crw` processes."""

from __future__ import annotations

import contextlib
import os
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


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
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
