"""The owner's multi-agent v2 tools on the simulated host, shaped as codex's
(docs/host.md, "Multi-agent v2"; tests/host/test_codex_multi_agent_v2.py pins the
real host's)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from crw.host.sim.connection import connect_in_memory
from crw.host.sim.server import open_sim_host
from tests.host.sim.support import SCHEMA, RawClient, RpcFailure, connected, task_text

NAME = "crw_0123456789ab_build_1_t1_a1"


async def _v2_owner(client: RawClient) -> str:
    return str((await client.request("sim/startOwner", {"multiAgentV2": True}))["threadId"])


async def _spawn(client: RawClient, owner: str, name: str = NAME, **more: Any) -> Any:
    message = task_text("build.1/t1-a1", "executor", SCHEMA)
    params = {"parentThreadId": owner, "task_name": name, "message": message} | more
    return await client.request("sim/v2/spawnAgent", params)


def _activities(owner: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        item
        for turn in owner["turns"]
        for item in turn["items"]
        if item["type"] == "subAgentActivity"
    ]


async def test_v2_spawn_answers_the_path_and_the_owner_names_the_child(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with connected(tmp_path) as (_, client):
        owner = await _v2_owner(client)
        answer = await _spawn(client, owner, model="gpt-x", reasoning_effort="high")
        read = await client.request("thread/read", {"threadId": owner, "includeTurns": True})
        (started,) = _activities(read["thread"])
        child_id = started["agentThreadId"]
        turn = (await client.wait_for("turn/completed", lambda p: p["threadId"] == child_id))[
            "turn"
        ]
        child = (await client.request("thread/read", {"threadId": child_id, "includeTurns": True}))[
            "thread"
        ]
        listed = await client.request("thread/list", {"sourceKinds": ["subAgentThreadSpawn"]})
    assert answer == {"task_name": f"/root/{NAME}"}
    assert (started["kind"], started["agentPath"]) == ("started", f"/root/{NAME}")
    assert child["parentThreadId"] == owner and child["agentRole"] is None
    assert child["source"]["subAgent"]["thread_spawn"]["agent_path"] == f"/root/{NAME}"
    assert (child["model"], child["reasoningEffort"]) == ("gpt-x", "high")
    # The task is an inter-agent message: no user message, nothing in the preview.
    assert [item["type"] for item in child["turns"][0]["items"]] == ["agentMessage"]
    assert child["preview"] == ""
    assert turn["status"] == "completed"
    assert listed["data"] == []


@pytest.mark.parametrize(
    ("name", "more", "refusal"),
    [
        ("Bad-Name", {}, "agent_name must use only lowercase letters, digits, and underscores"),
        (NAME, {"fork_context": False}, "fork_context is not supported in MultiAgentV2"),
        (NAME, {"fork_turns": "some"}, "fork_turns must be `none`, `all`"),
    ],
)
async def test_v2_spawn_refuses_what_codex_refuses(
    tmp_path: Path,
    autojump_clock: trio.testing.MockClock,
    name: str,
    more: dict[str, Any],
    refusal: str,
) -> None:
    async with connected(tmp_path) as (host, client):
        owner = await _v2_owner(client)
        with pytest.raises(RpcFailure) as refused:
            await _spawn(client, owner, name, **more)
        threads = len(host.state.threads)
    assert refusal in refused.value.message
    assert threads == 1  # the owner's only: no child made


async def test_a_childs_path_is_no_thread_id(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """thread/read and turn/start of a v2 child's path are refused as codex refuses
    them (an id is a uuid: `invalid thread id`, not `thread not found`), though the
    child exists."""
    async with connected(tmp_path) as (_, client):
        owner = await _v2_owner(client)
        await _spawn(client, owner)
        with pytest.raises(RpcFailure) as read:
            await client.request("thread/read", {"threadId": f"/root/{NAME}"})
        turn = {"threadId": f"/root/{NAME}", "input": [{"type": "text", "text": "go"}]}
        with pytest.raises(RpcFailure) as started:
            await client.request("turn/start", turn)
    for refused in (read, started):
        assert refused.value.code == -32600
        assert refused.value.message == (
            "invalid thread id: invalid character: expected an optional prefix of "
            "`urn:uuid:` followed by [0-9a-fA-F-], found `/` at 1"
        )


async def test_v2_name_is_unique_after_a_restart_and_a_followup_reaches_the_child(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with connected(tmp_path) as (host, client):
        owner = await _v2_owner(client)
        await _spawn(client, owner)
        await trio.sleep(60)
        await client.request("sim/restart")
        await client.request("thread/resume", {"threadId": owner})
        with pytest.raises(RpcFailure) as again:
            await _spawn(client, owner)
        await client.request(
            "sim/v2/followupTask",
            {"parentThreadId": owner, "target": NAME, "message": "crw-flow-op: build.1/t2-a1"},
        )
        await trio.sleep(60)
        wait = await client.request("sim/v2/waitAgent", {"parentThreadId": owner})
        child = next(t for t in host.state.threads.values() if t.agent_path)
        read = await client.request("thread/read", {"threadId": owner, "includeTurns": True})
    assert again.value.message == f"agent path `/root/{NAME}` already exists"
    assert [turn.status for turn in child.turns] == ["completed", "completed"]
    assert [a["kind"] for a in _activities(read["thread"])] == ["started", "interacted"]
    assert wait == {"message": "Wait completed.", "timed_out": False}


async def test_an_owner_gets_one_protocol_by_its_config(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """The host's config.toml `[features] multi_agent_v2` gives owners v2's tools
    (as codex's); v1's spawn is then unsupported, and v2's for a v1 owner."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text("[features]\nmulti_agent_v2 = true\n")
    async with open_sim_host(home) as host:
        client = RawClient(await connect_in_memory(host))
        await client.initialize()
        v2 = str((await client.request("sim/startOwner", {}))["threadId"])
        v1 = str((await client.request("sim/startOwner", {"multiAgentV2": False}))["threadId"])
        with pytest.raises(RpcFailure) as v1_on_v2:
            await client.request(
                "sim/spawnAgent", {"parentThreadId": v2, "agentType": "worker", "message": "m"}
            )
        with pytest.raises(RpcFailure) as v2_on_v1:
            await _spawn(client, v1)
    assert v1_on_v2.value.message == "unsupported call: spawn_agent"
    assert v2_on_v1.value.message == "unsupported call: collaborationspawn_agent"
