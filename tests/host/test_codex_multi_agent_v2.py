"""Codex's multi-agent v2 tools on the real `codex app-server`, offline (mock model).

Session calls rest on the v1 tools (`multi_agent_v1`); `multi_agent_v2` is a
feature of 0.163.0 and 0.169.0 alike (stable, off by default). These pin what an
owner with `[features] multi_agent_v2 = true` meets, each on both binaries, so a
codex upgrade that changes it goes red: the tools its model is given, their
outputs, the child's thread as thread/read and thread/list show it, where the
task text is visible, what the PreToolUse hook receives, and what turn/interrupt
does on a child. docs/host.md, "multi-agent v2", says what they saw.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import trio

from crw.host.mock_model import CODEX_MODEL, MockModel, write_codex_home
from crw.host.mock_replies import FunctionCall, ModelRequest, Reply, calls, text, valid
from tests.host.codex_env import (
    WAIT,
    Rpc,
    codex_binary,
    codex_env,
    initialized,
    private_app_server,
)

pytestmark = pytest.mark.codex

NAMESPACE = "collaboration"
TASK_NAME = "crw_x_1_t1_a1"
TASK = "crw-flow-op: x.1/t1-a1\nCRW-ROLE: explorer\n\nLook around."
NEW_TASK_HEADER = f"Message Type: NEW_TASK\nTask name: /root/{TASK_NAME}\nSender: /root\nPayload:\n"
SLEEPY = "SLEEP IN THE SHELL"
"""A task whose child runs `sleep 60` in its shell: a turn that stays active."""
SPAWNING = "SPAWN ONE YOURSELF"
"""A task whose child calls spawn_agent for a grandchild."""
GRANDCHILD = "grandchild"


def v2(name: str, **arguments: Any) -> FunctionCall:
    return FunctionCall(name, arguments, namespace=NAMESPACE)


def child_policy(request: ModelRequest) -> Reply:
    """A child's task arrives as no user message (the mock's scripts key on those):
    a task naming SLEEPY runs `sleep 60`, one naming SPAWNING spawns GRANDCHILD;
    anything else answers `{}`."""
    newest = request.body["input"][-1]
    if newest.get("type") == "agent_message" and SLEEPY in json.dumps(newest):
        return calls(FunctionCall("exec_command", {"cmd": "sleep 60"}))
    if newest.get("type") == "agent_message" and SPAWNING in json.dumps(newest):
        return calls(v2("spawn_agent", task_name=GRANDCHILD, message="x", fork_turns="none"))
    return valid()


CHILD_ANSWER_DELAY = 1.5
"""Seconds each child takes to answer in the test of the waits. codex's wait_agent
completes when its owner has input pending as it begins, or at the first change
of its mailbox after that: a child's answer delivered before the owner's next
model request is taken into that request's input, and the wait that request asks
for then sees no change and times out (once in CI, at 10 s). A child that answers
while the owner waits is the order the test pins."""


def slow_child(request: ModelRequest) -> Reply:
    """`child_policy`, answered after CHILD_ANSWER_DELAY (the server's own thread)."""
    time.sleep(CHILD_ANSWER_DELAY)
    return child_policy(request)


def v2_home(tmp_path: Path, model: MockModel, hook_matchers: tuple[str, ...] = ()) -> Path:
    """A CODEX_HOME with multi_agent_v2 on and, per matcher, a trusted PreToolUse
    hook that writes its matcher and its stdin, a file a run, under `tmp_path/hook-runs`."""
    home = write_codex_home(tmp_path / "codex-home", model.url)
    config = (home / "config.toml").read_text()
    config = config.replace("[features]\n", "[features]\nmulti_agent_v2 = true\n")
    hook = tmp_path / "hook.sh"
    runs = shlex.quote(str(tmp_path / "hook-runs"))
    hook.write_text(
        f'#!/bin/sh\nmkdir -p {runs}\nrun={runs}/$$\nprintf "%s\\n" "$1" > "$run.part"\n'
        'cat >> "$run.part"\nmv "$run.part" "$run.json"\n'
    )
    hook.chmod(0o755)
    for matcher in hook_matchers:
        command = f"{hook} {shlex.quote(matcher)}"
        config += (
            f"\n[[hooks.PreToolUse]]\nmatcher = {json.dumps(matcher)}\n"
            f'[[hooks.PreToolUse.hooks]]\ntype = "command"\ncommand = {json.dumps(command)}\n'
        )
    (home / "config.toml").write_text(config)
    return home


async def trust_hooks(home: Path, tmp_path: Path) -> None:
    """Trust every hook hooks/list shows (a hook runs only once trusted)."""
    async with private_app_server(home, tmp_path / "codex-list.log") as transport:
        rpc = await initialized(Rpc(transport))
        listed = await rpc.request("hooks/list", {"cwds": [str(tmp_path)]})
    with (home / "config.toml").open("a") as config:
        for hook in listed["data"][0]["hooks"]:
            config.write(
                f'\n[hooks.state."{hook["key"]}"]\ntrusted_hash = "{hook["currentHash"]}"\n'
            )


def hook_runs(tmp_path: Path) -> list[tuple[str, dict[str, Any]]]:
    """Each hook run: its matcher and the JSON it read."""
    found = sorted((tmp_path / "hook-runs").glob("*.json"))
    return [(m, json.loads(body)) for m, body in (f.read_text().split("\n", 1) for f in found)]


async def owner_turn(rpc: Rpc, owner: str, words: str) -> list[dict[str, Any]]:
    """Run one owner turn to completion; its items as thread/read shows them."""
    started = await rpc.request(
        "turn/start", {"threadId": owner, "input": [{"type": "text", "text": words}]}
    )
    turn_id = started["turn"]["id"]
    await rpc.until("turn/completed", lambda p: p["turn"]["id"] == turn_id)
    read = await rpc.request("thread/read", {"threadId": owner, "includeTurns": True})
    [turn] = [t for t in read["thread"]["turns"] if t["id"] == turn_id]
    items: list[dict[str, Any]] = turn["items"]
    return items


async def read_until(rpc: Rpc, thread_id: str, done: Any) -> dict[str, Any]:
    """thread/read (with turns) until `done(thread)`; the thread."""
    with trio.fail_after(WAIT):
        while True:
            read = await rpc.call("thread/read", {"threadId": thread_id, "includeTurns": True})
            if "result" in read and done(read["result"]["thread"]):
                thread: dict[str, Any] = read["result"]["thread"]
                return thread
            await trio.sleep(0.05)


def outputs_by_tool(model: MockModel) -> dict[str, list[str]]:
    """Each collaboration call's output, by tool name, in call order."""
    named: dict[str, str] = {}
    found: dict[str, str] = {}
    for request in model.requests:
        for item in request.body.get("input") or []:
            if item.get("type") == "function_call" and item.get("namespace") == NAMESPACE:
                named[item["call_id"]] = item["name"]
            elif item.get("type") == "function_call_output" and item["call_id"] in named:
                found[item["call_id"]] = item["output"]
    by_tool: dict[str, list[str]] = {}
    for call_id, output in found.items():
        by_tool.setdefault(named[call_id], []).append(output)
    return by_tool


def test_both_codex_versions_have_multi_agent_v2_stable_and_off(tmp_path: Path) -> None:
    """`codex features list`: multi_agent stable or deprecated and on, multi_agent_v2
    stable and off by default, on 0.163.0 as on 0.169.0."""
    listed = subprocess.run(
        [str(codex_binary()), "features", "list"],
        env=codex_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    features = {line.split()[0]: line.split()[1:] for line in listed.splitlines() if line.strip()}
    assert features["multi_agent_v2"][-2:] == ["stable", "false"]
    assert features["multi_agent"][-1] == "true"
    assert features["multi_agent"][-2] in {"stable", "deprecated"}


async def test_v2_owner_model_is_given_the_collaboration_namespace(tmp_path: Path) -> None:
    """The owner model's request carries a `collaboration` namespace of six
    functions (no close_agent, no agent_type), and no `multi_agent_v1` tools."""
    with MockModel() as model:
        home = v2_home(tmp_path, model)
        model.script("HELLO", text("hi"))
        async with private_app_server(home, tmp_path / "codex.log") as transport:
            rpc = await initialized(Rpc(transport))
            owner = (await rpc.request("thread/start", {"cwd": str(tmp_path)}))["thread"]["id"]
            await owner_turn(rpc, owner, "HELLO")
    [request] = model.requests
    tools = request.body["tools"]
    assert not [t for t in tools if t.get("name") == "multi_agent_v1"]
    assert "multi_agent_v1" not in json.dumps(request.body["input"])
    [space] = [t for t in tools if t.get("type") == "namespace" and t["name"] == NAMESPACE]
    functions = {f["name"]: f["parameters"] for f in space["tools"]}
    assert set(functions) == {
        "spawn_agent",
        "send_message",
        "followup_task",
        "wait_agent",
        "list_agents",
        "interrupt_agent",
    }
    shapes = {
        name: (sorted(p["properties"]), sorted(p.get("required", [])))
        for name, p in functions.items()
    }
    assert shapes == {
        "spawn_agent": (
            ["fork_turns", "message", "model", "reasoning_effort", "task_name"],
            ["message", "task_name"],
        ),
        "send_message": (["message", "target"], ["message", "target"]),
        "followup_task": (["message", "target"], ["message", "target"]),
        "wait_agent": (["timeout_ms"], []),
        "list_agents": (["path_prefix"], []),
        "interrupt_agent": (["target"], ["target"]),
    }
    spawn = functions["spawn_agent"]["properties"]
    assert spawn["message"]["encrypted"] is True
    assert "lowercase letters, digits, and underscores" in spawn["task_name"]["description"]
    assert "Only `all` and `none`" in spawn["fork_turns"]["description"]
    assert "min 10000" in functions["wait_agent"]["properties"]["timeout_ms"]["description"]
    prompt = json.dumps(request.body["input"])
    assert "You are `/root`" in prompt
    assert "There are 4 available concurrency slots" in prompt


async def test_v2_spawn_child_thread_and_where_the_task_text_is(tmp_path: Path) -> None:
    """spawn_agent answers only the child's path; the child is a subagent thread
    (parentThreadId, source subAgent.thread_spawn with agent_path and nickname)
    that thread/list does not list; its task arrives as an `agent_message` (the
    text in `encrypted_content`, plain offline), never a user message or a
    thread item, so thread/read shows no task text: the rollout and the hook do."""
    with MockModel(child_policy) as model:
        home = v2_home(tmp_path, model)
        spawn = v2(
            "spawn_agent",
            task_name=TASK_NAME,
            message=TASK,
            fork_turns="none",
            model=CODEX_MODEL,
            reasoning_effort="high",
        )
        model.script("PLEASE SPAWN", calls(spawn), text("owner done"))
        async with private_app_server(home, tmp_path / "codex.log") as transport:
            rpc = await initialized(Rpc(transport))
            owner = (await rpc.request("thread/start", {"cwd": str(tmp_path)}))["thread"]["id"]
            items = await owner_turn(rpc, owner, "PLEASE SPAWN")
            [started] = [
                i for i in items if i["type"] == "subAgentActivity" and i["kind"] == "started"
            ]
            child_id = started["agentThreadId"]
            child = await read_until(
                rpc, child_id, lambda t: t["turns"] and t["turns"][-1]["status"] == "completed"
            )
            owner_read = await rpc.request("thread/read", {"threadId": owner, "includeTurns": True})
            listings = [
                await rpc.request("thread/list", kinds)
                for kinds in (
                    {},
                    {"sourceKinds": ["subAgentThreadSpawn"]},
                    {"sourceKinds": ["subAgent"]},
                )
            ]
            loaded = await rpc.request("thread/loaded/list", {})

    assert outputs_by_tool(model)["spawn_agent"] == [
        json.dumps({"task_name": f"/root/{TASK_NAME}"}, separators=(",", ":"))
    ]
    assert not [i for i in items if i["type"] == "collabAgentToolCall"]
    assert started | {"agentThreadId": None} == {
        "type": "subAgentActivity",
        "id": started["id"],
        "kind": "started",
        "agentThreadId": None,
        "agentPath": f"/root/{TASK_NAME}",
        "model": CODEX_MODEL,
        "reasoningEffort": "high",
    } | {k: v for k, v in started.items() if k in {"startedAtMs", "completedAtMs"}}
    spawned = child["source"]["subAgent"]["thread_spawn"]
    assert isinstance(spawned["agent_nickname"], str) and spawned["agent_nickname"]
    assert spawned == {
        "parent_thread_id": owner,
        "depth": 1,
        "agent_path": f"/root/{TASK_NAME}",
        "agent_nickname": spawned["agent_nickname"],
        "agent_role": None,
    }
    assert (child["parentThreadId"], child["threadSource"], child["preview"]) == (
        owner,
        "subagent",
        "",
    )
    assert (child["agentNickname"], child["agentRole"]) == (spawned["agent_nickname"], None)
    assert (child["model"], child["reasoningEffort"]) == (CODEX_MODEL, "high")
    assert TASK not in json.dumps(child["turns"])
    assert [i["type"] for i in child["turns"][0]["items"]] == ["agentMessage"]
    assert [[t["id"] for t in listing["data"]] for listing in listings] == [[owner], [], []]
    assert set(loaded["data"]) == {owner, child_id}

    [asked] = [r for r in model.requests if r.body["reasoning"]["effort"] == "high"]
    newest = asked.body["input"][-1]
    assert newest["type"] == "agent_message"
    assert (newest["author"], newest["recipient"]) == ("/root", f"/root/{TASK_NAME}")
    assert newest["content"] == [
        {"type": "input_text", "text": NEW_TASK_HEADER},
        {"type": "encrypted_content", "encrypted_content": TASK},
    ]
    users = [i for i in asked.body["input"] if i.get("role") == "user"]
    assert users and all(TASK not in json.dumps(i) for i in users)
    assert asked.body["model"] == CODEX_MODEL
    rollout = read_text(child["path"])
    [meta] = [json.loads(line) for line in rollout.splitlines()][:1]
    assert meta["payload"]["agent_path"] == f"/root/{TASK_NAME}"
    assert (
        meta["payload"]["source"]["subagent"]["thread_spawn"]["agent_path"] == f"/root/{TASK_NAME}"
    )
    assert json.dumps(TASK)[1:-1] in rollout
    [task_line] = [
        line["payload"]
        for line in map(json.loads, rollout.splitlines())
        if line["type"] == "response_item" and line["payload"].get("type") == "agent_message"
    ]
    assert task_line["content"][1] == {"type": "encrypted_content", "encrypted_content": TASK}
    passthrough = task_line["internal_chat_message_metadata_passthrough"]
    assert passthrough["turn_id"] == child["turns"][0]["id"]
    assert child["turns"][0]["rootTurnId"] == owner_read["thread"]["turns"][-1]["id"]


async def test_v2_followup_send_wait_list_interrupt_answers(tmp_path: Path) -> None:
    """In one owner turn: spawn, wait (ends at the child's final answer), list,
    send, follow up, wait again; then in the next, by the child's thread id, follow
    up, wait and interrupt the idle child: each tool's output as the owner's model
    reads it, and what reaches the child. Each child answers while its owner waits
    (`CHILD_ANSWER_DELAY`)."""
    with MockModel(slow_child) as model:
        home = v2_home(tmp_path, model)
        target = {"target": TASK_NAME}
        model.script(
            "GO V2",
            calls(v2("spawn_agent", task_name=TASK_NAME, message=TASK, fork_turns="none")),
            calls(v2("wait_agent", timeout_ms=10000)),
            calls(v2("list_agents")),
            calls(v2("send_message", message="A NOTE", **target)),
            calls(v2("followup_task", message="A FOLLOW-UP", **target)),
            calls(v2("wait_agent", timeout_ms=10000)),
            text("owner done"),
        )

        async with private_app_server(home, tmp_path / "codex.log") as transport:
            rpc = await initialized(Rpc(transport))
            owner = (await rpc.request("thread/start", {"cwd": str(tmp_path)}))["thread"]["id"]
            items = await owner_turn(rpc, owner, "GO V2")
            [started] = [i for i in items if i.get("kind") == "started"]
            by_id = {"target": started["agentThreadId"]}
            model.script(
                "BY THREAD ID",
                calls(v2("followup_task", message="FOLLOW-UP BY ID", **by_id)),
                calls(v2("wait_agent", timeout_ms=10000)),
                calls(v2("interrupt_agent", **by_id)),
                text("stopped"),
            )
            await owner_turn(rpc, owner, "BY THREAD ID")
    outputs = outputs_by_tool(model)
    assert outputs["spawn_agent"] == [f'{{"task_name":"/root/{TASK_NAME}"}}']
    assert outputs["wait_agent"] == ['{"message":"Wait completed.","timed_out":false}'] * 3
    [listed] = outputs["list_agents"]
    agents = {a["agent_name"]: a["agent_status"] for a in json.loads(listed)["agents"]}
    assert agents == {"/root": "running", f"/root/{TASK_NAME}": {"completed": "{}"}}
    assert (outputs["send_message"], outputs["followup_task"]) == ([""], ["", ""])
    assert outputs["interrupt_agent"] == ['{"previous_status":{"completed":"{}"}}']
    kinds = [
        (i["type"], i.get("kind") or i.get("tool")) for i in items if i["type"] != "agentMessage"
    ]
    assert ("subAgentActivity", "started") in kinds and ("collabAgentToolCall", "wait") in kinds
    assert ("subAgentActivity", "interacted") in kinds
    task_messages = [
        item["content"]
        for r in model.requests
        for item in r.body["input"]
        if item.get("type") == "agent_message" and item.get("recipient") == f"/root/{TASK_NAME}"
    ]
    assert {"type": "encrypted_content", "encrypted_content": "FOLLOW-UP BY ID"} in [
        part for content in task_messages for part in content
    ]
    sent = {json.dumps(c) for c in task_messages}
    header = {c[0]["text"].split("\n")[0] for c in map(json.loads, sent)}
    assert header == {"Message Type: NEW_TASK", "Message Type: MESSAGE"}
    answers = [
        item
        for r in model.requests
        for item in r.body["input"]
        if item.get("type") == "agent_message" and item.get("recipient") == "/root"
    ]
    assert answers[0]["content"][0]["text"].startswith(
        f"Message Type: FINAL_ANSWER\nTask name: /root\nSender: /root/{TASK_NAME}\nPayload:\n"
    )


async def test_v2_spawn_hook_sees_the_namespace_glued_to_the_tool_name(tmp_path: Path) -> None:
    """PreToolUse on a v2 spawn: `tool_name` is `collaborationspawn_agent`, so a
    `spawn_agent` (or `collaboration.spawn_agent`) matcher does not fire;
    `tool_input` is the call's arguments, the message plain. A child is given no
    collaboration tools (with `[agents] max_depth = 2` too): its spawn is answered
    `unsupported call: collaborationspawn_agent`, and no hook runs for it."""
    matchers = (
        "spawn_agent",
        "collaboration.spawn_agent",
        "collaborationspawn_agent",
        ".*spawn_agent",
    )
    with MockModel(child_policy) as model:
        home = v2_home(tmp_path, model, matchers)
        with (home / "config.toml").open("a") as config:
            config.write("\n[agents]\nmax_depth = 2\n")
        await trust_hooks(home, tmp_path)
        message = f"{TASK}\n{SPAWNING}"
        arguments = {"task_name": TASK_NAME, "message": message, "fork_turns": "none"}
        model.script("PLEASE SPAWN", calls(v2("spawn_agent", **arguments)), text("owner done"))
        async with private_app_server(home, tmp_path / "codex.log") as transport:
            rpc = await initialized(Rpc(transport))
            owner = (await rpc.request("thread/start", {"cwd": str(tmp_path)}))["thread"]["id"]
            items = await owner_turn(rpc, owner, "PLEASE SPAWN")
            [started] = [i for i in items if i.get("kind") == "started"]
            child = started["agentThreadId"]
            await read_until(
                rpc, child, lambda t: t["turns"] and t["turns"][-1]["status"] == "completed"
            )
    runs = hook_runs(tmp_path)
    assert not [seen for _, seen in runs if seen["tool_input"].get("task_name") == GRANDCHILD]
    assert sorted(outputs_by_tool(model)["spawn_agent"]) == [
        "unsupported call: collaborationspawn_agent",  # the child's, in either order
        f'{{"task_name":"/root/{TASK_NAME}"}}',
    ]
    [asked] = [r for r in model.requests if SPAWNING in json.dumps(r.body["input"][-1])]
    assert NAMESPACE not in [tool.get("name") for tool in asked.body["tools"]]
    spawns = [(m, seen) for m, seen in runs if seen["tool_input"] == arguments]
    assert sorted(m for m, _ in spawns) == [".*spawn_agent", "collaborationspawn_agent"]
    seen = spawns[0][1]
    assert seen["tool_name"] == "collaborationspawn_agent"
    assert seen["tool_input"] == arguments
    assert (seen["session_id"], seen["hook_event_name"]) == (owner, "PreToolUse")
    assert seen["tool_use_id"] == started["id"]
    assert "agent_id" not in seen


async def test_turn_interrupt_on_a_v2_child_stops_its_turn(tmp_path: Path) -> None:
    """turn/interrupt on a v2 child's active turn answers {} and the turn then
    completes `interrupted`, the child idle, as on any thread."""
    with MockModel(child_policy) as model:
        home = v2_home(tmp_path, model)
        spawn = v2("spawn_agent", task_name=TASK_NAME, message=SLEEPY, fork_turns="none")
        model.script("PLEASE SPAWN", calls(spawn), text("owner done"))
        async with private_app_server(home, tmp_path / "codex.log") as transport:
            rpc = await initialized(Rpc(transport))
            owner = (await rpc.request("thread/start", {"cwd": str(tmp_path)}))["thread"]["id"]
            items = await owner_turn(rpc, owner, "PLEASE SPAWN")
            [started] = [
                i for i in items if i["type"] == "subAgentActivity" and i["kind"] == "started"
            ]
            child_id = started["agentThreadId"]
            await trio_wait_for_sleep(model)
            child = await read_until(rpc, child_id, lambda t: t["status"]["type"] == "active")
            turn_id = child["turns"][-1]["id"]
            answer = await rpc.call("turn/interrupt", {"threadId": child_id, "turnId": turn_id})
            after = await read_until(rpc, child_id, lambda t: t["status"]["type"] != "active")
    assert answer["result"] == {}
    assert after["status"] == {"type": "idle"}
    assert after["turns"][-1]["id"] == turn_id
    assert after["turns"][-1]["status"] == "interrupted"


async def trio_wait_for_sleep(model: MockModel) -> None:
    """Until the child's model asked for its `sleep 60` (its turn is then in the shell)."""
    with trio.fail_after(WAIT):
        while True:
            asked = [r for r in model.requests if SLEEPY in json.dumps(r.body["input"][-1:])]
            if any(r.reply and r.reply.calls for r in asked):
                return
            await trio.sleep(0.05)


def read_text(path: str) -> str:
    return Path(path).read_text()


async def test_v2_task_name_is_unique_and_the_owner_thread_finds_its_child(
    tmp_path: Path,
) -> None:
    """A second spawn_agent with a task name the tree holds is refused, as is a
    name outside `[a-z0-9_]`, and neither makes a thread; a 200-character name is
    taken. After the app-server restarts, thread/list still lists no child, the
    owner's thread/read still names each child's path and thread id, and once the
    owner is resumed the name is still taken (a spawn of it refused) though
    list_agents lists no child, and a follow-up by name reaches the child."""
    long_name = "a" * 200
    with MockModel(child_policy) as model:
        home = v2_home(tmp_path, model)
        model.script(
            "NAMES",
            calls(v2("spawn_agent", task_name=TASK_NAME, message=TASK, fork_turns="none")),
            calls(v2("spawn_agent", task_name=TASK_NAME, message="again", fork_turns="none")),
            calls(v2("spawn_agent", task_name="Bad-Name", message="x", fork_turns="none")),
            calls(v2("spawn_agent", task_name=long_name, message="x", fork_turns="none")),
            text("owner done"),
        )
        async with private_app_server(home, tmp_path / "codex.log") as transport:
            rpc = await initialized(Rpc(transport))
            owner = (await rpc.request("thread/start", {"cwd": str(tmp_path)}))["thread"]["id"]
            items = await owner_turn(rpc, owner, "NAMES")
        async with private_app_server(home, tmp_path / "codex-again.log") as transport:
            rpc = await initialized(Rpc(transport))
            listed = await rpc.request("thread/list", {"sourceKinds": ["subAgentThreadSpawn"]})
            again = await rpc.request("thread/read", {"threadId": owner, "includeTurns": True})
            started = {
                i["agentPath"]: i["agentThreadId"]
                for i in again["thread"]["turns"][-1]["items"]
                if i["type"] == "subAgentActivity" and i["kind"] == "started"
            }
            child = await rpc.request("thread/read", {"threadId": started[f"/root/{TASK_NAME}"]})
            await rpc.request("thread/resume", {"threadId": owner})
            model.script(
                "AFTER THE RESTART",
                calls(v2("spawn_agent", task_name=TASK_NAME, message="again", fork_turns="none")),
                calls(v2("list_agents")),
                calls(v2("followup_task", target=TASK_NAME, message="go on")),
                text("owner done"),
            )
            resumed = await owner_turn(rpc, owner, "AFTER THE RESTART")
    assert outputs_by_tool(model)["spawn_agent"] == [
        f'{{"task_name":"/root/{TASK_NAME}"}}',
        f"agent path `/root/{TASK_NAME}` already exists",
        "agent_name must use only lowercase letters, digits, and underscores",
        f'{{"task_name":"/root/{long_name}"}}',
        f"agent path `/root/{TASK_NAME}` already exists",
    ]
    outputs = outputs_by_tool(model)
    assert outputs["list_agents"] == [
        '{"agents":[{"agent_name":"/root","agent_status":"running"}]}'
    ]
    assert outputs["followup_task"] == [""]
    activities = [
        (i["kind"], i["agentThreadId"]) for i in resumed if i["type"] == "subAgentActivity"
    ]
    assert activities[0] == ("interacted", started[f"/root/{TASK_NAME}"])
    assert set(started) == {f"/root/{TASK_NAME}", f"/root/{long_name}"}
    assert [i["id"] for i in items if i.get("kind") == "started"] == [
        i["id"] for i in again["thread"]["turns"][-1]["items"] if i.get("kind") == "started"
    ]
    assert listed["data"] == []
    assert child["thread"]["status"] == {"type": "notLoaded"}
    assert child["thread"]["parentThreadId"] == owner
