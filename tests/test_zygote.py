"""A command forked from the worker's server (tests/zygote.py) is what the same
command run as a fresh `python -m crw` process is: its exit code, its stdout and
stderr; its environment and working directory are the caller's."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests import zygote

COMMANDS = [
    ["flow", "status", "nope", "--json"],
    ["flow", "validate", "/nonexistent/workflow.toml"],
    ["flow", "start", "--bogus"],
    ["flow", "--help"],
    ["flow", "list", "--json"],
]


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
def test_a_forked_command_answers_as_a_fresh_process(tmp_path: Path, argv: list[str]) -> None:
    server = zygote.zygote()
    assert server is not None, "the fork server did not start"
    env = env_in(tmp_path)
    forked = server.run(argv, env, tmp_path, 60)
    assert forked is not None
    fresh = cold(argv, env, tmp_path)
    assert (forked.returncode, forked.stdout, forked.stderr) == (
        fresh.returncode,
        fresh.stdout,
        fresh.stderr,
    )


def test_a_forked_command_has_the_callers_environment_and_directory(tmp_path: Path) -> None:
    """The state directory a command names is `CRW_STATE` when the environment
    sets it, else `.crw` in its working directory."""
    server = zygote.zygote()
    assert server is not None
    env = env_in(tmp_path)
    named = server.run(["flow", "status", "nope", "--json"], env, tmp_path, 60)
    assert named is not None and str(tmp_path / "state" / "flow") in named.stdout
    del env["CRW_STATE"]
    (tmp_path / "here").mkdir()
    here = server.run(["flow", "status", "nope", "--json"], env, tmp_path / "here", 60)
    assert here is not None and str(tmp_path / "here" / ".crw" / "flow") in here.stdout


def test_a_caller_whose_interpreter_settings_differ_runs_cold(tmp_path: Path) -> None:
    server = zygote.zygote()
    assert server is not None
    env = env_in(tmp_path) | {"PYTHONIOENCODING": "latin-1"}
    assert not server.takes(env)
    assert server.run(["flow", "--help"], env, tmp_path, 60) is None


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
