"""`crw flow init` against the real `codex app-server` 0.163.0 (offline, mock model):
the store it writes is on a model codex serves, names the agent types codex does
not build in, and passes the start's role_models once their tables are there."""

from __future__ import annotations

import contextlib
import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest
import trio

from crw.engine.owner.facts import CODEX_INSTALL
from tests.host.codex_env import CODEX_MODEL, SharedServer, crw_on, owner_thread

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.codex
def test_init_on_the_real_host_writes_a_store_its_start_takes(
    tmp_path: Path, codex_home_dir: Path, shared_codex_server: SharedServer
) -> None:
    """spec: FACTS-5: every role on the user's own model (config.toml's, which codex
    serves), the types codex does not build in named with the install; with their
    tables in config.toml the start judges the store ok, its models checked."""
    socket, home, state = shared_codex_server.socket_path, codex_home_dir, tmp_path / "state"
    host = f"unix:{socket}"
    init = crw_on(
        "flow", "init", "--host", host, "--state", str(state), "--json", home=home, cwd=tmp_path
    )
    assert init.returncode == 0, init.stderr
    out = json.loads(init.stdout)
    assert out["model"] == CODEX_MODEL
    assert {pair["model"] for pair in out["pairs"].values()} == {CODEX_MODEL}
    assert out["agent_types_unknown"] == ["architect", "executor", "reviewer"]
    assert (out["config"], out["install"]) == (str(home / "config.toml"), CODEX_INSTALL)
    with (home / "config.toml").open("a") as config:
        for name in out["agent_types_unknown"]:
            config.write(f'\n[agents.{name}]\ndescription = "The crw flow {name} role."\n')
    owner = trio.run(owner_thread, socket, tmp_path)
    workflow = str(REPO / "crw" / "examples" / "fix-issue.toml")
    args = ("flow", "start", workflow, "--host", host, "--owner", owner, "--state", str(state))
    result = crw_on(*args, "--json", home=home, cwd=tmp_path)
    started: dict[str, Any] = json.loads(result.stdout) if result.returncode == 0 else {}
    with contextlib.suppress(ProcessLookupError, TypeError):
        os.kill(started.get("pid"), signal.SIGKILL)  # type: ignore[arg-type]
    assert result.returncode == 0, result.stderr
    (fact,) = [fact for fact in started["facts"] if fact["name"] == "role_models"]
    assert (fact["ok"], fact["models_checked"]) == (True, True), fact["problems"]
