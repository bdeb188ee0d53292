"""The owner's tools as `sim/*` control methods: spawn, send_input, close_agent, and
the subagent threads they make, shaped as the real host's (host-protocol.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from tests.host.sim.support import (
    SCHEMA,
    RawClient,
    RpcFailure,
    answer_of,
    client_of,
    connected,
    owner_and_agent,
    task_text,
)


async def _owner_and_agent(
    client: RawClient, message: str = "crw-flow-op: build.1/t1-a1\nCRW-ROLE: executor", **more: Any
) -> tuple[str, str]:
    return await owner_and_agent(client, "worker", message, owner_cwd="/repo", **more)


async def _first_turn(client: RawClient, agent: str) -> dict[str, Any]:
    read = await client.request("thread/read", {"threadId": agent, "includeTurns": True})
    return dict(read["thread"]["turns"][0])


async def test_spawned_agent_is_a_subagent_thread_of_its_owner(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with connected(tmp_path) as (_, client):
        owner, agent = await _owner_and_agent(
            client, "hi", model="gpt-x", reasoningEffort="high", forkContext=False
        )
        thread = (await client.request("thread/read", {"threadId": agent}))["thread"]
        started = [
            n["params"]["thread"]["id"] for n in client.notes if n["method"] == "thread/started"
        ]
    assert thread["parentThreadId"] == owner
    assert (thread["threadSource"], thread["agentRole"]) == ("subagent", "worker")
    assert (thread["model"], thread["reasoningEffort"], thread["cwd"]) == ("gpt-x", "high", "/repo")
    assert thread["source"] == {
        "subAgent": {
            "thread_spawn": {
                "parent_thread_id": owner,
                "depth": 1,
                "agent_path": None,
                "agent_nickname": thread["agentNickname"],
                "agent_role": "worker",
            }
        }
    }
    assert thread["agentNickname"]
    assert thread["sessionId"] == owner
    assert thread["status"]["type"] == "active"
    assert started == [owner]


async def test_spawned_agent_runs_its_message_as_its_first_turn_at_once(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    text = task_text("review.2/t1-a1", "reviewer", SCHEMA)
    async with connected(tmp_path) as (_, client):
        _, agent = await _owner_and_agent(client, text)
        running = await _first_turn(client, agent)
        done = await client.turn_completed(running["id"])
    assert running["status"] == "inProgress"
    assert running["items"][0]["content"][0]["text"] == text
    assert done["status"] == "completed"
    assert answer_of(done) == {"verdict": "pass", "notes": ["x"]}


async def test_spawn_records_a_collab_agent_tool_call_on_the_owner(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with connected(tmp_path) as (_, client):
        owner = (await client.request("sim/startOwner", {}))["threadId"]
        await client.request("thread/resume", {"threadId": owner, "excludeTurns": True})
        spawn = {"parentThreadId": owner, "agentType": "explorer", "message": "look"}
        agent = (await client.request("sim/spawnAgent", spawn))["agentId"]
        started = await client.wait_for("item/started", lambda p: p["threadId"] == owner)
        completed = await client.wait_for("item/completed", lambda p: p["threadId"] == owner)
        read = await client.request("thread/read", {"threadId": owner, "includeTurns": True})
    assert started["item"]["type"] == "collabAgentToolCall"
    assert (started["item"]["tool"], started["item"]["receiverThreadIds"]) == ("spawnAgent", [])
    item = completed["item"]
    assert (item["status"], item["receiverThreadIds"]) == ("completed", [agent])
    assert (item["senderThreadId"], item["prompt"]) == (owner, "look")
    assert read["thread"]["turns"][-1]["items"] == [item]


async def test_subagent_events_reach_a_connection_that_did_not_subscribe(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with connected(tmp_path) as (host, client):
        watcher = await client_of(host)
        _, agent = await _owner_and_agent(client)
        turn = await watcher.wait_for("turn/started", lambda p: p["threadId"] == agent)
        await watcher.turn_completed(turn["turn"]["id"])
    assert "thread/tokenUsage/updated" in watcher.methods(agent)
    assert "item/completed" in watcher.methods(agent)


async def test_send_input_starts_a_new_turn_on_the_subagent(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with connected(tmp_path) as (_, client):
        _, agent = await _owner_and_agent(client)
        await client.turn_completed((await _first_turn(client, agent))["id"])
        repair = task_text("build.1/t2-a1", "executor", SCHEMA, "Repair your answer.")
        sent = await client.request("sim/sendInput", {"target": agent, "message": repair})
        done = await client.turn_completed(sent["turnId"])
        turns = await client.request(
            "thread/turns/list", {"threadId": agent, "sortDirection": "asc"}
        )
    assert done["status"] == "completed"
    assert [t["id"] for t in turns["data"]][1] == sent["turnId"]


async def test_close_agent_interrupts_and_leaves_a_readable_not_loaded_thread(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with connected(tmp_path) as (_, client):
        await client.request(
            "sim/script", {"match": {"role": "worker"}, "behaviour": {"hang": True}}
        )
        _, agent = await _owner_and_agent(client)
        turn_id = (await _first_turn(client, agent))["id"]
        await trio.sleep(10)
        assert await client.request("sim/closeAgent", {"target": agent}) == {}
        done = await client.turn_completed(turn_id)
        read = await client.request("thread/read", {"threadId": agent, "includeTurns": True})
        with pytest.raises(RpcFailure) as refused:
            await client.request("sim/sendInput", {"target": agent, "message": "more"})
    assert (done["status"], done["error"]) == ("interrupted", None)
    assert read["thread"]["status"] == {"type": "notLoaded"}
    assert read["thread"]["turns"][0]["id"] == turn_id
    assert refused.value.message == f"thread not found: {agent}"


async def test_spawn_under_an_unknown_owner_is_refused(tmp_path: Path) -> None:
    async with connected(tmp_path) as (_, client):
        spawn = {"parentThreadId": "nobody", "agentType": "worker", "message": "m"}
        with pytest.raises(RpcFailure) as refused:
            await client.request("sim/spawnAgent", spawn)
    assert (refused.value.code, refused.value.message) == (-32600, "thread not found: nobody")


async def test_a_spawn_message_naming_a_packet_answers_the_packet_schema(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    packet = tmp_path / "packet.md"
    packet.write_text(task_text("build.1/t1-a1", "executor", SCHEMA))
    message = "\n".join(
        [
            "crw-flow-op: build.1/t1-a1",
            "CRW-ROLE: executor",
            f"Read the task packet {packet} in full and follow it exactly.",
        ]
    )
    async with connected(tmp_path) as (_, client):
        _, agent = await _owner_and_agent(client, message)
        done = await client.turn_completed((await _first_turn(client, agent))["id"])
    assert answer_of(done) == {"verdict": "pass", "notes": ["x"]}


async def test_a_spawned_turn_posts_and_reads_its_items_without_copying_them(
    tmp_path: Path, autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The owner's spawn item and the subagent's turn go out as they were when posted
    (an item is replaced, never changed in place), without a deep copy of each item
    at each notification and each read (the host's CPU a call)."""
    import copy

    deep = copy.deepcopy
    copied: list[type] = []

    def counted(value: Any, memo: Any = None) -> Any:
        if value is not None:  # a turn's error, none here
            copied.append(type(value))
        return deep(value, memo)

    async with connected(tmp_path) as (_, client):
        owner = (await client.request("sim/startOwner", {}))["threadId"]
        await client.request("thread/resume", {"threadId": owner, "excludeTurns": True})
        monkeypatch.setattr(copy, "deepcopy", counted)
        spawn = {"parentThreadId": owner, "agentType": "explorer", "message": "look"}
        agent = (await client.request("sim/spawnAgent", spawn))["agentId"]
        started = await client.wait_for("item/started", lambda p: p["threadId"] == owner)
        await client.wait_for("turn/completed", lambda p: p["threadId"] == agent)
        read = await client.request("thread/read", {"threadId": agent, "includeTurns": True})
    assert (started["item"]["status"], started["item"]["agentsStates"]) == ("inProgress", {})
    assert [i["type"] for i in read["thread"]["turns"][0]["items"]] == [
        "userMessage",
        "agentMessage",
    ]
    assert copied == []
