"""The spawn hook installed and trusted in the real `codex app-server` 0.163.0 (offline,
mock model): the owner's spawn runs with its role's pair, a subagent's spawn and a
full-history fork are refused, and the ledger holds a line for each."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import trio

from crw.host.mock_model import CODEX_MODEL, MockModel, write_codex_home
from crw.host.mock_replies import FunctionCall, calls, text
from tests.hook.spawn_helpers import PAIRS, RUN, bind_thread, ledger_lines
from tests.hook.test_install import crw
from tests.host.codex_env import WAIT, Rpc, initialized, private_app_server

pytestmark = pytest.mark.codex

CHILD = "crw-flow-op: x.1/t1-a1\nCRW-ROLE: explorer\n\nLook around."
FORK = "crw-flow-op: x.2/t1-a1\nCRW-ROLE: explorer\n\nGo on from here."
BLOCKED = "Tool call blocked by PreToolUse hook: "


def spawn(**arguments: Any) -> FunctionCall:
    return FunctionCall("spawn_agent", arguments, namespace="multi_agent_v1")


async def finished(rpc: Rpc, thread_id: str) -> dict[str, Any]:
    """The thread once its last turn has completed (a thread whose first turn is not
    stored yet answers thread/read with an error: read again)."""
    with trio.fail_after(WAIT):
        while True:
            read = await rpc.call("thread/read", {"threadId": thread_id, "includeTurns": True})
            turns = read["result"]["thread"]["turns"] if "result" in read else []
            if turns and turns[-1]["status"] == "completed":
                thread: dict[str, Any] = read["result"]["thread"]
                return thread
            await trio.sleep(0.05)


def tool_outputs(model: MockModel) -> list[str]:
    """Each tool call's output once, by its call_id: every request carries its
    thread's history, so a later request of the owner's thread (codex asks again
    when a subagent it spawned finishes first) repeats the outputs before it."""
    outputs = {
        item.get("call_id"): str(item.get("output"))
        for request in model.requests
        for item in request.body.get("input") or []
        if item.get("type") == "function_call_output"
    }
    return list(outputs.values())


async def test_owner_spawn_runs_with_its_roles_pair_leaf_and_fork_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: HOOK-1, HOOK-2, HOOK-3, HOOK-4, HOOK-11"""
    state = tmp_path / "state"
    monkeypatch.setenv("CRW_STATE", str(state))  # the hook gets the app-server's environment
    pairs = PAIRS | {"explorer": {"agent_type": "explorer", "model": CODEX_MODEL, "effort": "high"}}
    with MockModel() as model:
        home = write_codex_home(tmp_path / "codex-home", model.url)
        with (home / "config.toml").open("a") as config:  # a child may spawn: the hook's to refuse
            config.write("\n[agents]\nmax_depth = 2\n")
        installed = crw("flow", "hook", "install", "--host", "codex", "--json", home=home)
        assert json.loads(installed.stdout)["trusted"] is True, installed.stderr
        sent = spawn(
            message=CHILD, agent_type="explorer", model="gpt-5.4-mini", reasoning_effort="low"
        )
        fork = spawn(message=FORK, agent_type="explorer", fork_context=True)
        model.script("PLEASE SPAWN", calls(sent, fork), text("owner done"))
        model.script(
            "x.1/t1-a1", calls(spawn(message="Help me.", agent_type="explorer")), text("{}")
        )
        async with private_app_server(home, tmp_path / "codex.log") as transport:
            rpc = await initialized(Rpc(transport))
            owner = (await rpc.request("thread/start", {"cwd": str(tmp_path)}))["thread"]["id"]
            bind_thread(state, owner, pairs)
            turn = {"threadId": owner, "input": [{"type": "text", "text": "PLEASE SPAWN"}]}
            await rpc.request("turn/start", turn)
            items = (await finished(rpc, owner))["turns"][-1]["items"]
            [made] = [
                i for i in items if i["type"] == "collabAgentToolCall" and i["receiverThreadIds"]
            ]
            assert (made["model"], made["reasoningEffort"]) == (CODEX_MODEL, "high")
            [child] = made["receiverThreadIds"]
            await finished(rpc, child)

    [asked] = [r for r in model.requests if r.user_text.startswith(CHILD)][:1]
    assert (asked.body["model"], asked.body["reasoning"]["effort"]) == (CODEX_MODEL, "high")
    blocked = sorted(out for out in tool_outputs(model) if out.startswith(BLOCKED))
    assert [out[len(BLOCKED) :].split(":")[0] for out in blocked] == [
        "full_history_fork_refused",
        "leaf_spawn_refused",
    ]
    lines = {(line["decision"], line["refusal"]): line for line in ledger_lines(state, owner)}
    assert set(lines) == {
        ("allow", None),
        ("deny", "full_history_fork_refused"),
        ("deny", "leaf_spawn_refused"),
    }
    assert lines["allow", None] | {"turn_id": None, "tool_use_id": None} == {
        "run_id": RUN,
        "turn_id": None,
        "tool_use_id": None,
        "agent_id": None,
        "decision": "allow",
        "refusal": None,
        "role": "explorer",
        "op": "x.1/t1",
        "agent_type": "explorer",
        "model": CODEX_MODEL,
        "reasoning_effort": "high",
        "warnings": [],
    }
    assert lines["allow", None]["tool_use_id"] == made["id"]
    leaf = lines["deny", "leaf_spawn_refused"]
    assert (leaf["agent_id"], leaf["op"], leaf["warnings"]) == (child, None, ["unrecorded_spawn"])
    assert lines["deny", "full_history_fork_refused"]["op"] == "x.2/t1"
