"""What the owned-run harness sets up (an empty HOME, the spawn hook forked from the
worker's fork server) and leaves behind: nothing, however busy the owner was when
the test ended."""

from __future__ import annotations

import shlex
import signal
from pathlib import Path

import pytest
import trio

from crw.binding.install import read_config, spawn_hooks
from crw.host.mock_replies import ModelRequest, Reply
from tests import zygote
from tests.codex_owner.harness import RUN_LIMIT, owned_run
from tests.codex_owner.policy import Policies, SubagentPolicy, exec_call
from tests.processes import processes_naming, reap_naming

pytestmark = pytest.mark.codex

LONG = "sleep 120"


def busy_owner(request: ModelRequest) -> Reply:
    """An owner whose shell runs a command that outlasts the test."""
    return exec_call(LONG)


async def test_an_owner_turn_still_running_at_the_end_is_stopped_with_its_server(
    tmp_path: Path,
) -> None:
    """The block ends while the owner's shell runs a command: the server is killed
    at once (under SIGTERM codex would first finish the turn) and the command, in a
    session of its own, is reaped with it: no process names the test's directory."""
    try:
        with owned_run(tmp_path, Policies(busy_owner, SubagentPolicy())) as setup:
            await setup.begin()
            with trio.fail_after(RUN_LIMIT):
                while True:
                    if LONG in processes_naming(tmp_path).values():
                        break
                    await trio.sleep(0.05)
        left = processes_naming(tmp_path)
    finally:
        reap_naming(tmp_path)

    assert setup.server.process.returncode == -signal.SIGKILL
    assert left == {}


def test_codex_runs_on_an_empty_home_and_its_hook_is_the_fork_servers(
    tmp_path: Path,
) -> None:
    """The app-server's HOME is an empty directory (conftest.py: its shell snapshot
    reads no developer's shell set-up). Once installed and trusted by `crw flow
    hook install`, the hook's command is the script of owner_shell.py (which
    test_owner_shell.py proves decides as the installed `crw` does), and the host
    lists it trusted (else the set-up fails)."""
    if zygote.zygote() is None:
        pytest.skip(f"{zygote.COLD} is set: no fork server, the installed hook runs")
    with owned_run(tmp_path, Policies(busy_owner, SubagentPolicy())) as setup:
        config = read_config(setup.home / "config.toml")
        environ = Path(f"/proc/{setup.server.process.pid}/environ").read_bytes()

    home = Path(dict(v.split("=", 1) for v in environ.decode().split("\0") if "=" in v)["HOME"])
    assert home.name.startswith("crw-home-") and not any(home.iterdir())
    script = shlex.join([str(tmp_path / "bin" / "crw"), "flow", "hook", "spawn"])
    assert spawn_hooks(config.data) == [script]
