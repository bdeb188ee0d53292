"""The app-server methods of the simulated host: result shapes, errors, the order of
notifications and who receives them, as `codex app-server` 0.163.0 (host-protocol.md)."""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from crw.host.sim import items, state
from crw.host.sim.connection import connect_in_memory
from crw.host.sim.server import open_sim_host
from tests.host.sim.support import (
    SCHEMA,
    RawClient,
    RpcFailure,
    client_of,
    connected,
    owner_and_agent,
    task_text,
    text_input,
)

TMPDIR_KEY = "shell_environment_policy.set.TMPDIR"


async def _start(client: RawClient, **params: object) -> str:
    result = await client.request("thread/start", {"cwd": "/work", **params})
    return str(result["thread"]["id"])


async def _turn(client: RawClient, thread_id: str, text: str = "hello") -> str:
    result = await client.request("turn/start", {"threadId": thread_id, "input": text_input(text)})
    return str(result["turn"]["id"])


async def test_initialize_answers_user_agent_and_codex_home(tmp_path: Path) -> None:
    async with connected(tmp_path) as (_, client):
        info = {"name": "t", "title": "t", "version": "0"}
        result = await client.request("initialize", {"clientInfo": info, "capabilities": {}})
    assert set(result) == {"userAgent", "codexHome", "platformFamily", "platformOs"}
    assert result["codexHome"] == str(tmp_path / "codex-home")


async def test_request_before_initialize_is_refused(tmp_path: Path) -> None:
    async with connected(tmp_path) as (host, _):
        raw = RawClient(await connect_in_memory(host))
        with pytest.raises(RpcFailure) as failure:
            await raw.request("thread/list")
    assert (failure.value.code, failure.value.message) == (-32600, "Not initialized")


async def test_unknown_method_is_an_invalid_request_naming_it(tmp_path: Path) -> None:
    async with connected(tmp_path) as (_, client):
        with pytest.raises(RpcFailure) as failure:
            await client.request("thread/bogus")
    assert failure.value.code == -32600
    assert failure.value.message.startswith("Invalid request: unknown variant `thread/bogus`")


async def test_thread_start_answers_an_idle_thread_and_keeps_config_leaf_keys(
    tmp_path: Path,
) -> None:
    async with connected(tmp_path) as (host, client):
        result = await client.request(
            "thread/start", {"cwd": "/work", "model": "m1", "config": {TMPDIR_KEY: "/x"}}
        )
        started = await client.wait_for("thread/started")
    thread = result["thread"]
    assert {"thread", "model", "modelProvider", "reasoningEffort", "cwd"} <= set(result)
    assert (result["model"], thread["model"], thread["cwd"]) == ("m1", "m1", "/work")
    assert thread["status"] == {"type": "idle"}
    assert (thread["source"], thread["threadSource"], thread["parentThreadId"]) == (
        "vscode",
        None,
        None,
    )
    assert thread["sessionId"] == thread["id"]
    assert thread["turns"] == []
    assert thread["path"].startswith(str(tmp_path / "codex-home" / "sessions"))
    assert started["thread"]["id"] == thread["id"]
    assert host.state.threads[thread["id"]].config == {TMPDIR_KEY: "/x"}


async def test_thread_start_and_fork_make_the_thread_s_wire_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """thread/started and the answer of thread/start (thread/fork) show the same
    Thread object: it is made once for both, and both carry it whole."""
    made: list[str] = []
    wire = state.Thread.wire

    def counting(thread: state.Thread, **kwargs: Any) -> dict[str, Any]:
        made.append(thread.id)
        return wire(thread, **kwargs)

    monkeypatch.setattr(state.Thread, "wire", counting)
    async with connected(tmp_path) as (_, client):
        result = await client.request("thread/start", {"cwd": "/work"})
        started = await client.wait_for("thread/started")
        fork = await client.request("thread/fork", {"threadId": result["thread"]["id"]})
        forked = await client.wait_for("thread/started", lambda p: p["thread"] != started["thread"])
    assert made == [result["thread"]["id"], fork["thread"]["id"]]
    assert started["thread"] == result["thread"]
    assert forked["thread"] == fork["thread"]


async def test_unknown_thread_errors_are_worded_per_method_as_the_host(tmp_path: Path) -> None:
    missing = "019a0000-0000-7000-8000-000000000000"
    expected = {
        "thread/read": f"thread not loaded: {missing}",
        "thread/turns/list": f"thread not loaded: {missing}",
        "turn/start": f"thread not found: {missing}",
        "turn/interrupt": f"thread not found: {missing}",
        "thread/resume": f"no rollout found for thread id {missing}",
        "thread/fork": f"no rollout found for thread id {missing}",
    }
    seen = {}
    async with connected(tmp_path) as (_, client):
        for method in expected:
            with pytest.raises(RpcFailure) as failure:
                await client.request(method, {"threadId": missing, "turnId": "t", "input": []})
            seen[method] = (failure.value.code, failure.value.message)
        gone = await client.request("thread/unsubscribe", {"threadId": missing})
    assert seen == {method: (-32600, message) for method, message in expected.items()}
    assert gone == {"status": "notLoaded"}


async def test_completed_turn_notifies_in_the_host_order(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with connected(tmp_path) as (_, client):
        thread_id = await _start(client)
        result = await client.request(
            "turn/start", {"threadId": thread_id, "input": text_input("hello")}
        )
        turn = await client.turn_completed(result["turn"]["id"])
        read = await client.request("thread/read", {"threadId": thread_id, "includeTurns": True})
    assert result["turn"]["status"] == "inProgress"
    assert client.methods(thread_id) == [
        "thread/started",
        "thread/status/changed",
        "turn/started",
        "item/started",
        "item/completed",
        "item/started",
        "item/completed",
        "thread/tokenUsage/updated",
        "thread/status/changed",
        "turn/completed",
    ]
    assert all("emittedAtMs" in note for note in client.notes)
    statuses = [n["params"]["status"] for n in client.notes if n["method"].endswith("changed")]
    assert statuses == [{"type": "active", "activeFlags": []}, {"type": "idle"}]
    assert (turn["status"], turn["error"], turn["durationMs"]) == ("completed", None, 1000)
    full = read["thread"]["turns"][0]
    assert [i["type"] for i in full["items"]] == ["userMessage", "agentMessage"]
    assert full["items"][0]["content"] == [{"type": "text", "text": "hello", "text_elements": []}]
    assert read["thread"]["preview"] == "hello"


@pytest.mark.parametrize(
    "info",
    ["usageLimitExceeded", {"responseStreamDisconnected": {"httpStatusCode": 502}}],
)
async def test_failed_turn_sets_system_error_then_error_then_completed(
    tmp_path: Path, autojump_clock: trio.testing.MockClock, info: object
) -> None:
    async with connected(tmp_path) as (_, client):
        await client.request("sim/script", {"match": {}, "behaviour": {"fail": info}})
        thread_id = await _start(client)
        turn = await client.turn_completed(await _turn(client, thread_id))
        error = await client.wait_for("error")
        read = await client.request("thread/read", {"threadId": thread_id})
        again = await client.request(
            "turn/start", {"threadId": thread_id, "input": text_input("again")}
        )
    tail = client.methods(thread_id)[-3:]
    assert tail == ["thread/status/changed", "error", "turn/completed"]
    assert client.notes[-3]["params"]["status"] == {"type": "systemError"}
    assert turn["status"] == "failed"
    assert turn["error"]["codexErrorInfo"] == info
    assert set(turn["error"]) == {"message", "codexErrorInfo", "additionalDetails"}
    assert (error["willRetry"], error["error"]) == (False, turn["error"])
    assert read["thread"]["status"] == {"type": "systemError"}
    assert again["turn"]["status"] == "inProgress"


async def test_a_late_end_reads_interrupted_without_error_between_the_error_and_the_end(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """`lateEnd`: codex's order when a failing turn's rollout lags its error: the
    thread goes systemError and `error` comes, the turn reads interrupted with no
    error, and only `lateEnd` seconds on does it end failed."""
    behaviour = {"fail": "contextWindowExceeded", "lateEnd": 30}
    async with connected(tmp_path) as (_, client):
        await client.request("sim/script", {"match": {}, "behaviour": behaviour})
        thread_id = await _start(client)
        turn_id = await _turn(client, thread_id)
        error = await client.wait_for("error")
        told = trio.current_time()
        read = {"threadId": thread_id, "includeTurns": True}
        during = await client.request("thread/read", read)
        turn = await client.turn_completed(turn_id)
        late = trio.current_time() - told
        after = await client.request("thread/read", read)
    tail = client.methods(thread_id)[-3:]
    assert tail == ["thread/status/changed", "error", "turn/completed"]
    assert during["thread"]["status"] == {"type": "systemError"}
    shown = during["thread"]["turns"][0]
    assert (shown["status"], shown["error"]) == ("interrupted", None)
    assert late == pytest.approx(30.0)
    assert (turn["status"], turn["error"]) == ("failed", error["error"])
    assert after["thread"]["turns"][0]["status"] == "failed"


async def test_a_late_end_of_a_completing_turn_reads_interrupted_with_its_answer_before_the_end(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """`lateEnd` without `fail`: codex's order when a completing turn's end lags its
    answer: the thread goes idle, the turn reads interrupted with no error, its
    answer in it, and only `lateEnd` seconds on does `turn/completed` come."""
    async with connected(tmp_path) as (_, client):
        await client.request("sim/script", {"match": {}, "behaviour": {"lateEnd": 0.5}})
        thread_id = await _start(client)
        turn_id = await _turn(client, thread_id)
        await client.wait_for("thread/tokenUsage/updated")
        answered = trio.current_time()
        read = {"threadId": thread_id, "includeTurns": True}
        during = await client.request("thread/read", read)
        turn = await client.turn_completed(turn_id)
        late = trio.current_time() - answered
    assert during["thread"]["status"] == {"type": "idle"}
    shown = during["thread"]["turns"][0]
    assert (shown["status"], shown["error"]) == ("interrupted", None)
    assert [i["type"] for i in shown["items"]][-1] == "agentMessage"
    assert client.methods(thread_id)[-2:] == ["thread/status/changed", "turn/completed"]
    assert late == pytest.approx(0.5)
    assert (turn["status"], turn["error"]) == ("completed", None)


async def test_a_late_start_reads_interrupted_without_error_until_the_turn_runs(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """`lateStart`: codex's order when it has not yet set a turn it started
    running: the turn reads interrupted with no error on an idle thread, and only
    `lateStart` seconds on does it run (the thread active) and then complete."""
    async with connected(tmp_path) as (_, client):
        await client.request("sim/script", {"match": {}, "behaviour": {"lateStart": 0.5}})
        thread_id = await _start(client)
        started = trio.current_time()
        turn_id = await _turn(client, thread_id)
        read = {"threadId": thread_id, "includeTurns": True}
        before = await client.request("thread/read", read)
        await trio.sleep(0.49)
        still = await client.request("thread/read", read)
        await trio.sleep(0.02)
        running = await client.request("thread/read", read)
        turn = await client.turn_completed(turn_id)
        took = trio.current_time() - started
    for shown in (before, still):
        assert shown["thread"]["status"] == {"type": "idle"}
        only = shown["thread"]["turns"][0]
        assert (only["status"], only["error"]) == ("interrupted", None)
    assert running["thread"]["status"]["type"] == "active"
    assert running["thread"]["turns"][0]["status"] == "inProgress"
    assert turn["status"] == "completed"
    assert took == pytest.approx(1.5)  # lateStart, then the turn's default second


async def test_a_turn_interrupted_before_it_runs_ends_interrupted_and_never_runs(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """An interrupt in a `lateStart` moment ends the turn interrupted at once: it
    does not run on when its moment is over."""
    async with connected(tmp_path) as (_, client):
        await client.request("sim/script", {"match": {}, "behaviour": {"lateStart": 30}})
        thread_id = await _start(client)
        turn_id = await _turn(client, thread_id)
        await client.request("turn/interrupt", {"threadId": thread_id, "turnId": turn_id})
        turn = await client.turn_completed(turn_id)
        ended = trio.current_time()
        await trio.sleep(60)
        read = await client.request("thread/read", {"threadId": thread_id, "includeTurns": True})
    assert ended < 1.0
    assert (turn["status"], turn["error"]) == ("interrupted", None)
    assert read["thread"]["status"] == {"type": "idle"}
    assert read["thread"]["turns"][0]["status"] == "interrupted"
    assert "agentMessage" not in [i["type"] for i in read["thread"]["turns"][0]["items"]]


def _last_turn(read: dict[str, Any]) -> tuple[str, list[str]]:
    turn = read["thread"]["turns"][-1]
    return turn["status"], [i["type"] for i in turn["items"]]


async def test_an_agent_closed_before_its_turn_runs_ends_it_interrupted_and_it_never_runs(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """`sim/closeAgent` in a `lateStart` moment (the turn reads interrupted, yet
    lives) ends the turn interrupted at once: the closed thread does not wake and
    run it when the moment is over."""
    async with connected(tmp_path) as (_, client):
        await client.request("sim/script", {"match": {}, "behaviour": {"lateStart": 30}})
        thread_id = await _start(client)
        turn_id = await _turn(client, thread_id)
        await client.request("sim/closeAgent", {"target": thread_id})
        turn = await client.turn_completed(turn_id)
        ended = trio.current_time()
        await trio.sleep(60)
        read = await client.request("thread/read", {"threadId": thread_id, "includeTurns": True})
    assert ended < 1.0
    assert (turn["status"], turn["error"]) == ("interrupted", None)
    assert read["thread"]["status"] == {"type": "notLoaded"}
    status, items = _last_turn(read)
    assert status == "interrupted" and "agentMessage" not in items


async def test_a_restart_before_a_turn_runs_ends_it_and_it_never_runs(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """`sim/restart` in a `lateStart` moment: the turn ends interrupted with the
    host's process, and its thread stays notLoaded past the moment."""
    async with connected(tmp_path) as (_, client):
        await client.request("sim/script", {"match": {}, "behaviour": {"lateStart": 30}})
        thread_id = await _start(client)
        await _turn(client, thread_id)
        await client.request("sim/restart", {})
        await trio.sleep(60)
        read = await client.request("thread/read", {"threadId": thread_id, "includeTurns": True})
    assert read["thread"]["status"] == {"type": "notLoaded"}
    status, items = _last_turn(read)
    assert status == "interrupted" and "agentMessage" not in items


async def test_an_agent_closed_before_its_answered_turn_ends_ends_it_with_its_answer(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """`sim/closeAgent` in a completing turn's `lateEnd` moment ends it
    interrupted at once, its answer kept; the thread stays notLoaded."""
    async with connected(tmp_path) as (_, client):
        await client.request("sim/script", {"match": {}, "behaviour": {"lateEnd": 30}})
        thread_id = await _start(client)
        turn_id = await _turn(client, thread_id)
        await client.wait_for("thread/tokenUsage/updated")
        answered = trio.current_time()
        await client.request("sim/closeAgent", {"target": thread_id})
        turn = await client.turn_completed(turn_id)
        took = trio.current_time() - answered
        await trio.sleep(60)
        read = await client.request("thread/read", {"threadId": thread_id, "includeTurns": True})
    assert took < 1.0
    assert (turn["status"], turn["error"]) == ("interrupted", None)
    assert read["thread"]["status"] == {"type": "notLoaded"}
    status, items = _last_turn(read)
    assert status == "interrupted" and items[-1] == "agentMessage"


async def test_an_interrupt_in_a_late_end_moment_leaves_the_turn_to_its_end(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """`turn/interrupt` after a completing turn answered, in its `lateEnd` moment:
    its end is on its way, so it ends completed when the moment is over."""
    async with connected(tmp_path) as (_, client):
        await client.request("sim/script", {"match": {}, "behaviour": {"lateEnd": 0.5}})
        thread_id = await _start(client)
        turn_id = await _turn(client, thread_id)
        await client.wait_for("thread/tokenUsage/updated")
        await client.request("turn/interrupt", {"threadId": thread_id, "turnId": turn_id})
        turn = await client.turn_completed(turn_id)
    assert (turn["status"], turn["error"]) == ("completed", None)


@pytest.mark.parametrize("moment", ["lateStart", "lateEnd"])
async def test_a_second_turn_is_refused_while_a_turn_reads_interrupted_yet_lives(
    tmp_path: Path, autojump_clock: trio.testing.MockClock, moment: str
) -> None:
    """A turn in a `lateStart` or `lateEnd` moment is still the thread's turn: a
    `turn/start` then is refused as for any running turn, never a second runner."""
    async with connected(tmp_path) as (_, client):
        await client.request("sim/script", {"match": {}, "behaviour": {moment: 30}})
        thread_id = await _start(client)
        await _turn(client, thread_id)
        if moment == "lateEnd":
            await client.wait_for("thread/tokenUsage/updated")
        with pytest.raises(RpcFailure) as failure:
            await _turn(client, thread_id, "again")
    assert "already has an active turn" in str(failure.value)


async def test_interrupt_ends_the_turn_interrupted_with_no_error_keeping_what_it_streamed(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    behaviour = {"hang": True, "answer": {"verdict": "pass"}}
    async with connected(tmp_path) as (_, client):
        await client.request("sim/script", {"match": {}, "behaviour": behaviour})
        thread_id = await _start(client)
        turn_id = await _turn(client, thread_id)
        await client.wait_for("thread/tokenUsage/updated")
        await trio.sleep(3600)
        running = await client.request("thread/read", {"threadId": thread_id, "includeTurns": True})
        answer = await client.request("turn/interrupt", {"threadId": thread_id, "turnId": turn_id})
        turn = await client.turn_completed(turn_id)
    assert running["thread"]["status"]["type"] == "active"
    assert running["thread"]["turns"][0]["status"] == "inProgress"
    assert answer == {}
    assert client.methods(thread_id)[-2:] == ["thread/status/changed", "turn/completed"]
    assert (turn["status"], turn["error"]) == ("interrupted", None)
    assert [(i["type"], i["phase"]) for i in turn["items"]] == [("agentMessage", "final_answer")]


async def test_turn_start_on_a_thread_with_a_turn_in_progress_is_refused(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with connected(tmp_path) as (_, client):
        thread_id = await _start(client)
        await _turn(client, thread_id)
        with pytest.raises(RpcFailure) as failure:
            await _turn(client, thread_id)
    assert failure.value.code == -32600


async def test_thread_list_lists_interactive_threads_unless_asked_for_subagents(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with connected(tmp_path) as (_, client):
        first = await _start(client)
        owner, agent = await owner_and_agent(client, owner_cwd="/elsewhere")
        plain = await client.request("thread/list", {})
        subagents = await client.request("thread/list", {"sourceKinds": ["subAgentThreadSpawn"]})
        by_cwd = await client.request("thread/list", {"cwd": "/work"})
        page1 = await client.request("thread/list", {"limit": 1})
        page2 = await client.request("thread/list", {"limit": 1, "cursor": page1["nextCursor"]})
    assert [t["id"] for t in plain["data"]] == [owner, first]
    assert [t["id"] for t in subagents["data"]] == [agent]
    assert [t["id"] for t in by_cwd["data"]] == [first]
    assert [t["id"] for t in page1["data"] + page2["data"]] == [owner, first]
    assert page2["nextCursor"] is None


async def test_loaded_list_names_threads_in_memory_only(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with connected(tmp_path) as (_, client):
        owner, agent = await owner_and_agent(client, "explorer")
        before = await client.request("thread/loaded/list", {})
        await client.request("sim/closeAgent", {"target": agent})
        after = await client.request("thread/loaded/list", {})
    assert before == {"data": [owner, agent], "nextCursor": None}
    assert after["data"] == [owner]


async def test_turns_list_pages_newest_first_with_the_asked_items_view(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with connected(tmp_path) as (_, client):
        thread_id = await _start(client)
        turns = [await client.turn_completed(await _turn(client, thread_id)) for _ in range(3)]
        first = await client.request(
            "thread/turns/list", {"threadId": thread_id, "limit": 2, "itemsView": "full"}
        )
        rest = await client.request(
            "thread/turns/list", {"threadId": thread_id, "cursor": first["nextCursor"]}
        )
    ids = [t["id"] for t in turns]
    assert [t["id"] for t in first["data"]] == ids[:0:-1]
    assert [t["id"] for t in rest["data"]] == ids[:1]
    assert first["data"][0]["itemsView"] == "full"
    assert [i["type"] for i in first["data"][0]["items"]] == ["userMessage", "agentMessage"]
    assert rest["data"][0]["itemsView"] == "summary"


async def test_resume_of_a_not_loaded_thread_loads_it_and_subscribes(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with connected(tmp_path) as (host, client):
        thread_id = await _start(client)
        await client.turn_completed(await _turn(client, thread_id))
        host.state.threads[thread_id].status = "notLoaded"
        other = await client_of(host)
        resumed = await other.request(
            "thread/resume", {"threadId": thread_id, "config": {TMPDIR_KEY: "/y"}}
        )
        slim = await other.request(
            "thread/resume",
            {"threadId": thread_id, "excludeTurns": True, "config": {TMPDIR_KEY: "/z"}},
        )
        turn_id = await _turn(other, thread_id)
        await other.turn_completed(turn_id)
    assert resumed["thread"]["status"] == {"type": "idle"}
    assert len(resumed["thread"]["turns"]) == 1
    assert slim["thread"]["turns"] == []
    # loaded with the resume's overrides; the resume of a loaded thread changes none
    assert host.state.threads[thread_id].config == {TMPDIR_KEY: "/y"}
    assert "turn/started" in other.methods(thread_id)


async def test_fork_copies_history_up_to_last_turn_into_a_new_thread(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with connected(tmp_path) as (host, client):
        source = await _start(client, config={TMPDIR_KEY: "/x"})
        first = await client.turn_completed(await _turn(client, source))
        await client.turn_completed(await _turn(client, source))
        forked = await client.request(
            "thread/fork",
            {"threadId": source, "lastTurnId": first["id"], "config": {"a.b": 1}},
        )
        read = await client.request("thread/read", {"threadId": forked["thread"]["id"]})
        fork_id = forked["thread"]["id"]
        full = await client.request("thread/read", {"threadId": fork_id, "includeTurns": True})
    assert fork_id != source
    assert read["thread"]["forkedFromId"] == source
    assert [t["id"] for t in full["thread"]["turns"]] == [first["id"]]
    assert host.state.threads[fork_id].config == {"a.b": 1}  # the source's are not inherited


async def test_unsubscribe_stops_turn_notifications_but_not_status_changes(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with connected(tmp_path) as (host, client):
        thread_id = await _start(client)
        status = await client.request("thread/unsubscribe", {"threadId": thread_id})
        again = await client.request("thread/unsubscribe", {"threadId": thread_id})
        other = await client_of(host)
        await other.request("thread/resume", {"threadId": thread_id, "excludeTurns": True})
        await other.turn_completed(await _turn(other, thread_id))
        await client.wait_for("thread/status/changed", lambda p: p["status"]["type"] == "idle")
    assert (status, again) == ({"status": "unsubscribed"}, {"status": "notSubscribed"})
    assert client.methods(thread_id) == [
        "thread/started",
        "thread/status/changed",
        "thread/status/changed",
    ]


async def test_a_second_connection_sees_the_first_ones_threads_and_status_changes(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with connected(tmp_path) as (host, client):
        other = await client_of(host)
        thread_id = await _start(client)
        turn_id = await _turn(client, thread_id)
        running = await other.request("thread/read", {"threadId": thread_id, "includeTurns": True})
        await client.turn_completed(turn_id)
        await other.wait_for("thread/status/changed", lambda p: p["status"]["type"] == "idle")
        listed = await other.request("thread/list", {})
    assert running["thread"]["status"]["type"] == "active"
    assert running["thread"]["turns"][0]["status"] == "inProgress"
    assert [t["id"] for t in listed["data"]] == [thread_id]
    assert other.methods(thread_id) == [
        "thread/started",
        "thread/status/changed",
        "thread/status/changed",
    ]


async def test_a_client_that_disconnects_mid_turn_does_not_stop_the_turn(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with connected(tmp_path) as (host, client):
        leaving = await client_of(host)
        thread_id = await _start(leaving)
        await _turn(leaving, thread_id, task_text("build.1/t1-a1", "executor", SCHEMA))
        await leaving.transport.aclose()
        await trio.sleep(5)
        read = await client.request("thread/read", {"threadId": thread_id, "includeTurns": True})
    assert read["thread"]["status"] == {"type": "idle"}
    assert read["thread"]["turns"][0]["status"] == "completed"


async def test_malformed_params_are_an_invalid_request_and_the_host_serves_on(
    tmp_path: Path,
) -> None:
    async with connected(tmp_path) as (_, client):
        thread_id = await _start(client)
        with pytest.raises(RpcFailure) as failure:
            await client.request("turn/start", {"threadId": thread_id, "input": [1]})
        listed = await client.request("thread/list", {})
    assert failure.value.code == -32600
    assert [t["id"] for t in listed["data"]] == [thread_id]


async def test_a_client_that_opts_out_of_notifications_is_sent_none_of_them(
    tmp_path: Path,
) -> None:
    """`capabilities.optOutNotificationMethods` at `initialize` (codex app-server's
    README, 0.163.0): the host sends that connection none of the methods named,
    exact names, and every other client what it sends it anyway."""
    async with connected(tmp_path) as (host, other):
        quiet = RawClient(await connect_in_memory(host))
        opted = ["thread/started", "item/started", "item/completed", "no/such/method"]
        await quiet.initialize({"optOutNotificationMethods": opted})
        thread_id = await _start(quiet)
        await quiet.turn_completed(await _turn(quiet, thread_id))
        await other.request("sim/stats")  # the other's notifications are all in
    assert quiet.methods() == [
        "thread/status/changed",
        "turn/started",
        "thread/tokenUsage/updated",
        "thread/status/changed",
        "turn/completed",
    ]
    assert other.methods() == [
        "thread/started",
        "thread/status/changed",
        "thread/status/changed",
    ]


@pytest.mark.parametrize("opt_out", ["thread/started", [1], {"a": 1}])
async def test_an_opt_out_that_is_not_a_list_of_method_names_is_refused(
    tmp_path: Path, opt_out: object
) -> None:
    async with open_sim_host(tmp_path / "codex-home") as host:
        client = RawClient(await connect_in_memory(host))
        with pytest.raises(RpcFailure) as failure:
            await client.initialize({"optOutNotificationMethods": opt_out})
        with pytest.raises(RpcFailure) as later:
            await client.request("thread/start", {})
    assert failure.value.code == -32600
    assert "optOutNotificationMethods must be a list of strings" in failure.value.message
    assert later.value.message == "Not initialized"


async def test_stats_count_the_notifications_posted_to_each_connection(tmp_path: Path) -> None:
    async with connected(tmp_path) as (host, other):
        quiet = RawClient(await connect_in_memory(host))
        await quiet.initialize({"optOutNotificationMethods": ["thread/status/changed"]})
        thread_id = await _start(quiet)
        await quiet.turn_completed(await _turn(quiet, thread_id))
        stats = await other.request("sim/stats")
    # thread/started to both; a status change twice to the other only; the turn's
    # own to its subscriber only.
    assert stats["notifications"]["thread/started"] == 2
    assert stats["notifications"]["thread/status/changed"] == 2
    assert stats["notifications"]["turn/completed"] == 1


async def test_stats_counts_every_request_served_by_method(tmp_path: Path) -> None:
    async with connected(tmp_path) as (_, client):
        await client.request("thread/start", {"cwd": "/w"})
        await client.request("thread/start", {"cwd": "/w"})
        with pytest.raises(RpcFailure):
            await client.request("thread/read", {"threadId": "nope"})
        stats = await client.request("sim/stats")
    assert stats["requests"]["thread/start"] == 2
    assert stats["requests"]["thread/read"] == 1
    assert stats["requests"]["sim/stats"] == 1


def test_the_launcher_waits_for_a_listening_socket_not_its_file(tmp_path: Path) -> None:
    """The socket file exists from bind() on, a moment before listen(): a client that
    connects then is refused, so `launch_sim` waits until a connection is accepted."""
    import socket

    from crw.host.sim.process import _listens

    path = tmp_path / "s.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        server.bind(str(path))
        assert path.exists() and not _listens(path)
        server.listen()
        assert _listens(path)
    finally:
        server.close()


def test_ids_are_uuid4_made_from_one_random_read_a_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    """A spawned agent takes five ids: they come from one `os.urandom` a batch of
    ID_BATCH, not a getrandom each, and read as `str(uuid.uuid4())` does."""
    reads: list[int] = []
    real = os.urandom

    def counting(size: int) -> bytes:
        reads.append(size)
        return real(size)

    monkeypatch.setattr(os, "urandom", counting)
    monkeypatch.setattr(items, "_IDS", items._ids())
    ids = [items.new_id() for _ in range(2 * items.ID_BATCH)]
    assert reads == [16 * items.ID_BATCH] * 2
    assert len(set(ids)) == len(ids)
    for made in ids:
        parsed = uuid.UUID(made)
        assert (str(parsed), parsed.version, parsed.variant) == (made, 4, uuid.RFC_4122)
