"""The start preview's facts against the real shared `codex app-server` (each binary)
(offline, mock model): its `model/list`, its agent types, its `hooks/list` trust
and its threads are what role_models, spawn_hook and host_reachable read."""

from __future__ import annotations

import contextlib
import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.codex_bins import CodexBin
from tests.host.codex_env import CODEX_MODEL, SharedServer, crw_on, owner_thread

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.codex
def test_the_facts_read_the_real_hosts_models_agent_types_hooks_and_threads(
    tmp_path: Path, codex_home_dir: Path, shared_codex_server: SharedServer, codex_bin: CodexBin
) -> None:
    """spec: FACTS-5 (a model codex does not serve and an agent type it does not
    know, as the real host would refuse their spawns); the preview names the
    codex that answered."""
    socket, home = shared_codex_server.socket_path, codex_home_dir
    state = tmp_path / "state"
    state.mkdir()
    (state / "roles.toml").write_text(
        f'[architect]\nagent_type = "architect"\nmodel = "gpt-5.4-mini"\neffort = "high"\n'
        f'[explorer]\nagent_type = "explorer"\nmodel = "{CODEX_MODEL}"\neffort = "low"\n'
    )
    installed = crw_on(
        "flow", "hook", "install", "--host", f"unix:{socket}", home=home, cwd=tmp_path
    )
    assert installed.returncode == 0, installed.stdout + installed.stderr
    owner = trio.run(owner_thread, socket, tmp_path)
    workflow = str(REPO / "crw" / "examples" / "fix-issue.toml")
    args = ("flow", "start", workflow, "--host", f"unix:{socket}", "--owner", owner)
    result = crw_on(*args, "--state", str(state), "--json", home=home, cwd=tmp_path)
    out: dict[str, Any] = json.loads(result.stdout) if result.returncode == 0 else {}
    with contextlib.suppress(ProcessLookupError, TypeError):
        os.kill(out.get("pid"), signal.SIGKILL)  # type: ignore[arg-type]
    assert result.returncode == 0, result.stderr
    assert out["host_version"] == f"codex {codex_bin.version}"
    facts = {fact["name"]: fact for fact in out["facts"]}
    assert facts["host_reachable"]["ok"] is True, facts["host_reachable"]
    assert (facts["spawn_hook"]["ok"], facts["spawn_hook"]["trust"]) == (True, "trusted")
    problems = facts["role_models"]["problems"]
    served = [p for p in problems if p.startswith("architect's model gpt-5.4-mini is not served")]
    assert len(served) == 1 and CODEX_MODEL in served[0], problems
    assert not any(p.startswith("explorer's") for p in problems), problems
    unknown = [p for p in problems if p.startswith("agent types architect (architect), ")]
    assert len(unknown) == 1 and "are unknown to the host" in unknown[0], problems
