"""The spawn hook (`crw flow hook install`) on a real `codex app-server` whose owner
has multi-agent v2 (offline, mock model): the owner's v2 spawn runs with its role's
pair and no history, and a full-history fork is refused, each with its ledger line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from crw.host.mock_model import CODEX_MODEL, MockModel, write_codex_home
from crw.host.mock_replies import FunctionCall, calls, text
from tests.hook.spawn_helpers import PAIRS, RUN, bind_thread, ledger_lines
from tests.hook.test_codex_hook import BLOCKED, finished, tool_outputs
from tests.hook.test_install import crw
from tests.host.codex_env import Rpc, initialized, private_app_server

pytestmark = pytest.mark.codex

CHILD = "crw-flow-op: x.1/t1-a1\nCRW-ROLE: explorer\n\nLook around."
FORK = "crw-flow-op: x.2/t1-a1\nCRW-ROLE: explorer\n\nGo on from here."


def v2_spawn(**arguments: object) -> FunctionCall:
    return FunctionCall("spawn_agent", dict(arguments), namespace="collaboration")


async def test_owner_v2_spawn_runs_with_its_roles_pair_and_no_history_fork_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: HOOK-1, HOOK-3, HOOK-4"""
    state = tmp_path / "state"
    monkeypatch.setenv("CRW_STATE", str(state))  # the hook gets the app-server's environment
    pairs = PAIRS | {"explorer": {"agent_type": "explorer", "model": CODEX_MODEL, "effort": "high"}}
    with MockModel() as model:
        home = write_codex_home(tmp_path / "codex-home", model.url)
        config = (home / "config.toml").read_text()
        config = config.replace("[features]\n", "[features]\nmulti_agent_v2 = true\n")
        (home / "config.toml").write_text(config)
        installed = crw("flow", "hook", "install", "--host", "codex", "--json", home=home)
        assert json.loads(installed.stdout)["trusted"] is True, installed.stderr
        sent = v2_spawn(
            task_name="crw_child", message=CHILD, model="gpt-5.4-mini", reasoning_effort="low"
        )
        fork = v2_spawn(task_name="crw_fork", message=FORK, fork_turns="all")
        model.script("PLEASE SPAWN", calls(sent, fork), text("owner done"))
        async with private_app_server(home, tmp_path / "codex.log") as transport:
            rpc = await initialized(Rpc(transport))
            owner = (await rpc.request("thread/start", {"cwd": str(tmp_path)}))["thread"]["id"]
            bind_thread(state, owner, pairs)
            turn = {"threadId": owner, "input": [{"type": "text", "text": "PLEASE SPAWN"}]}
            await rpc.request("turn/start", turn)
            items = (await finished(rpc, owner))["turns"][-1]["items"]
            [made] = [
                i for i in items if i["type"] == "subAgentActivity" and i["kind"] == "started"
            ]
            child = await finished(rpc, made["agentThreadId"])

    assert (made["agentPath"], made["model"], made["reasoningEffort"]) == (
        "/root/crw_child",
        CODEX_MODEL,
        "high",
    )
    assert (child["model"], child["reasoningEffort"]) == (CODEX_MODEL, "high")
    [asked] = [r for r in model.requests if r.body["reasoning"]["effort"] == "high"]
    assert not [i for i in asked.body["input"] if i.get("role") == "user" and "PLEASE" in str(i)]
    blocked = [out for out in tool_outputs(model) if out.startswith(BLOCKED)]
    assert [out[len(BLOCKED) :].split(":")[0] for out in blocked] == ["full_history_fork_refused"]
    assert 'fork_turns="none"' in blocked[0]
    lines = {(line["decision"], line["refusal"]): line for line in ledger_lines(state, owner)}
    assert set(lines) == {("allow", None), ("deny", "full_history_fork_refused")}
    assert lines["allow", None] | {"turn_id": None} == {
        "run_id": RUN,
        "turn_id": None,
        "tool_use_id": made["id"],
        "agent_id": None,
        "decision": "allow",
        "refusal": None,
        "role": "explorer",
        "op": "x.1/t1",
        "agent_type": None,
        "model": CODEX_MODEL,
        "reasoning_effort": "high",
        "warnings": [],
    }
    assert lines["deny", "full_history_fork_refused"]["op"] == "x.2/t1"
