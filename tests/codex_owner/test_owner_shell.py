"""The `crw` script the owner's shell finds first (owner_shell.py): it has the
worker's fork server run the command on the shell's own descriptors and exits as
the command did, or runs the real `crw` when a fork cannot start the command as
a fresh process would."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import zygote
from tests.codex_owner import owner_shell
from tests.hook.spawn_helpers import bind, ledger_lines, spawn_input

SERVER_ENV = {"LANG": "C.UTF-8", "PYTHONUNBUFFERED": "1", "HOME": "/nowhere"}


@pytest.fixture
def server_path() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="crw-sock-", dir="/tmp") as short:
        yield Path(short) / "s"


def fake_server(path: Path, code: str, asked: list[dict[str, Any]]) -> threading.Thread:
    """A fork server for one command: it writes `forked <argv>` to the command's
    stdout, reports pid 4242, then exit status `code`."""
    listening = socket.socket(socket.AF_UNIX)
    listening.bind(str(path))
    listening.listen(1)

    def serve() -> None:
        with listening:
            listening.settimeout(60)
            conn, _ = listening.accept()
            with conn:
                message, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
                asked.append(json.loads(message))
                os.write(fds[1], f"forked {' '.join(asked[0]['argv'])}\n".encode())
                for fd in fds:
                    os.close(fd)
                conn.sendall(f"4242\n{code}\n".encode())

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return thread


def real_crw(tmp_path: Path) -> Path:
    """A stand-in for the real `crw`: it says it ran cold, with its arguments."""
    real = tmp_path / "real-crw"
    real.write_text('#!/bin/sh\necho "cold $*"\n')
    real.chmod(0o755)
    return real


def run_script(script: Path, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(script), "flow", "next", "run-1", "--json"],
        env=env,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize("code", ["0", "3", "-15"])
def test_the_script_has_the_server_run_the_command_on_its_own_streams(
    tmp_path: Path, server_path: Path, code: str
) -> None:
    """The server gets the command's argv, environment, directory and umask, and
    the script's own descriptors (the command writes to the shell's stdout); the
    script exits with the command's code, or dies of its signal."""
    asked: list[dict[str, Any]] = []
    thread = fake_server(server_path, code, asked)
    script = owner_shell.install(tmp_path / "bin", server_path, SERVER_ENV, real_crw(tmp_path))
    env = {"LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "PYTHONUNBUFFERED": "1", "CRW_STATE": "/s"}
    done = run_script(script, env, tmp_path)
    thread.join(60)

    assert (done.returncode, done.stdout) == (int(code), "forked flow next run-1 --json\n")
    [request] = asked
    umask = os.umask(0o077)
    os.umask(umask)
    assert request == {
        "argv": ["flow", "next", "run-1", "--json"],
        "env": env,
        "cwd": str(tmp_path),
        "umask": umask,
    }


@pytest.mark.parametrize(
    "differs",
    [{"PYTHONHASHSEED": "1"}, {"LC_ALL": "POSIX"}, {"TZ": "UTC"}, {"PYTHONUNBUFFERED": ""}],
)
def test_a_command_whose_interpreter_would_start_otherwise_runs_the_real_crw(
    tmp_path: Path, server_path: Path, differs: dict[str, str]
) -> None:
    """What an interpreter takes at its start differs from the server's (a fork
    cannot give it): the real `crw` runs, with the same arguments."""
    listening = socket.socket(socket.AF_UNIX)
    listening.bind(str(server_path))
    listening.listen(1)
    script = owner_shell.install(tmp_path / "bin", server_path, SERVER_ENV, real_crw(tmp_path))
    env = {"LANG": "C.UTF-8", "PYTHONUNBUFFERED": "1"} | differs
    if not differs.get("PYTHONUNBUFFERED", "x"):
        del env["PYTHONUNBUFFERED"]
    with listening:
        done = run_script(script, env, tmp_path)
        listening.setblocking(False)
        with pytest.raises(BlockingIOError):
            listening.accept()  # never asked

    assert (done.returncode, done.stdout) == (0, "cold flow next run-1 --json\n")


def test_with_no_server_the_script_runs_the_real_crw(tmp_path: Path, server_path: Path) -> None:
    script = owner_shell.install(tmp_path / "bin", server_path, SERVER_ENV, real_crw(tmp_path))
    done = run_script(script, dict(SERVER_ENV), tmp_path)

    assert (done.returncode, done.stdout) == (0, "cold flow next run-1 --json\n")


def test_a_command_forked_through_the_script_answers_as_the_real_crw(tmp_path: Path) -> None:
    """On the worker's own fork server (tests/zygote.py), with the locale codex's
    shell sets: the same exit code, stdout and stderr as the real `crw`."""
    server = zygote.zygote()
    if server is None:
        pytest.skip(f"{zygote.COLD} is set: no fork server")
    script = owner_shell.install(tmp_path / "bin", server.path, server.env)
    env = server.env | {"LC_ALL": "C.UTF-8", "LC_CTYPE": "C.UTF-8", "TMPDIR": str(tmp_path)}
    argv = ["flow", "status", "no-such-run", "--state", str(tmp_path / "state"), "--json"]
    ran = [
        subprocess.run(
            [str(command), *argv],
            env=env,
            cwd=tmp_path,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=60,
        )
        for command in (script, Path(sys.executable).parent / "crw")
    ]
    forked, cold = ran

    assert forked.returncode == cold.returncode == 2
    assert (forked.stdout, forked.stderr) == (cold.stdout, cold.stderr)
    assert "no-such-run" in forked.stdout


def test_the_spawn_hook_forked_through_the_script_decides_as_the_installed_one(
    tmp_path: Path,
) -> None:
    """The hook codex runs in the owned-run tests (harness.fork_the_hook): the
    script, given codex's hook input on its stdin, has the fork server's child read
    it and decide, as `crw flow hook spawn` of the real `crw` does: the same reply
    on stdout, nothing on stderr, exit 0, the same ledger line in its state."""
    server = zygote.zygote()
    if server is None:
        pytest.skip(f"{zygote.COLD} is set: no fork server")
    script = owner_shell.install(tmp_path / "bin", server.path, server.env)
    said = json.dumps(spawn_input("crw-flow-op: x.1/t1-a1\nCRW-ROLE: explorer\n\nLook around."))
    done, lines = [], []
    for name, command in (("forked", script), ("cold", Path(sys.executable).parent / "crw")):
        state = tmp_path / name
        bind(state)
        done.append(
            subprocess.run(
                [str(command), "flow", "hook", "spawn"],
                input=said,
                env=server.env | {"CRW_STATE": str(state), "TMPDIR": str(tmp_path)},
                cwd=tmp_path,
                capture_output=True,
                text=True,
                timeout=60,
            )
        )
        lines.append(ledger_lines(state))
    forked, cold = done

    assert (forked.returncode, forked.stdout, forked.stderr) == (0, cold.stdout, "")
    assert json.loads(forked.stdout)["hookSpecificOutput"]["updatedInput"]["model"] == "gpt-explore"
    assert lines[0] == lines[1] != []
