"""The real `codex app-server` 0.163.0, offline, spoken to raw over both framings.

These pin what host-protocol.md says the host does, with the mock model behind it:
answers and their phase, token counts (notification, rollout file), and failed
turns. Each runs over stdio (a private child, JSON lines) and over a shared
server on a unix socket (WebSocket). The client here is the raw `Rpc` of
codex_env; the product's is `crw.host.client`.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]
import pytest
import trio

from crw.host.mock_model import MockModel
from crw.host.mock_replies import (
    FunctionCall,
    ModelRequest,
    Usage,
    calls,
    contract_schema,
    fail,
    failing_instance,
    invalid,
    text,
    valid,
)
from crw.host.sim.instance import example_instance
from crw.host.transport import JsonLinesTransport
from crw.host.websocket import WebSocketTransport, websocket_client
from tests.host.codex_env import Rpc, SharedServer, initialized, private_app_server

pytestmark = pytest.mark.codex

SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["files", "done"],
    "properties": {
        "files": {"type": "array", "items": {"type": "string"}, "minItems": 1},
        "done": {"type": "boolean"},
    },
}


def turn_text(marker: str, schema: Any = SCHEMA, role: str = "executor") -> str:
    """A turn's text by the shared convention: marker, role, task, output contract."""
    return (
        f"crw-flow-op: {marker}\nCRW-ROLE: {role}\n\nFind the files.\n\n"
        "## Output contract\nEnd with one JSON object that satisfies this schema.\n\n"
        f"```json\n{json.dumps(schema, indent=2)}\n```\n"
    )


@pytest.fixture(params=["stdio", "unix"])
def framing(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SharedServer | None]:
    """None for a private stdio child, else the shared server on a unix socket."""
    if request.param == "stdio":
        yield None
    else:
        yield request.getfixturevalue("shared_codex_server")


@pytest.fixture
async def host(
    framing: SharedServer | None, codex_home_dir: Path, tmp_path: Path, nursery: trio.Nursery
) -> AsyncIterator[Rpc]:
    """An initialized connection to the real host."""
    if framing is None:
        async with private_app_server(codex_home_dir, tmp_path / "stdio.log") as transport:
            yield await initialized(Rpc(transport))
        return
    stream = await trio.open_unix_socket(str(framing.socket_path))
    socket_transport = await websocket_client(stream, "localhost", "/", name="codex app-server")
    try:
        yield await initialized(Rpc(socket_transport))
    finally:
        await socket_transport.aclose()


async def start_thread(rpc: Rpc, tmp_path: Path) -> dict[str, Any]:
    tmpdir = tmp_path / "thread-tmp"
    tmpdir.mkdir(exist_ok=True)
    config = {"shell_environment_policy.set.TMPDIR": str(tmpdir)}
    result = await rpc.request("thread/start", {"cwd": str(tmp_path), "config": config})
    thread: dict[str, Any] = result["thread"]
    assert thread["status"] == {"type": "idle"}
    return thread


async def run_turn(rpc: Rpc, thread_id: str, body: str, **extra: Any) -> dict[str, Any]:
    """Start a turn and wait for its turn/completed; the completed (summary) turn."""
    params = {"threadId": thread_id, "input": [{"type": "text", "text": body, "text_elements": []}]}
    started = await rpc.request("turn/start", params | extra)
    turn_id = started["turn"]["id"]
    assert started["turn"]["status"] == "inProgress"
    completed = await rpc.until("turn/completed", lambda p: p["turn"]["id"] == turn_id)
    turn: dict[str, Any] = completed["turn"]
    return turn


async def read_turns(rpc: Rpc, thread_id: str) -> dict[str, Any]:
    result = await rpc.request("thread/read", {"threadId": thread_id, "includeTurns": True})
    thread: dict[str, Any] = result["thread"]
    return thread


def of_turn(turn_id: str) -> Callable[[dict[str, Any]], bool]:
    return lambda params: bool(params.get("turnId") == turn_id)


def agent_messages(turn: dict[str, Any]) -> list[dict[str, Any]]:
    return [item for item in turn["items"] if item["type"] == "agentMessage"]


def camel_parts(usage: Usage) -> dict[str, int]:
    return {
        "inputTokens": usage.input_tokens,
        "cachedInputTokens": usage.cached_tokens,
        "outputTokens": usage.output_tokens,
        "reasoningOutputTokens": usage.reasoning_tokens,
        "totalTokens": usage.total,
    }


def snake_parts(usage: Usage) -> dict[str, int]:
    return {
        "input_tokens": usage.input_tokens,
        "cached_input_tokens": usage.cached_tokens,
        "output_tokens": usage.output_tokens,
        "reasoning_output_tokens": usage.reasoning_tokens,
        "total_tokens": usage.total,
    }


def plus(a: Usage, b: Usage) -> Usage:
    return Usage(
        a.input_tokens + b.input_tokens,
        a.cached_tokens + b.cached_tokens,
        a.output_tokens + b.output_tokens,
        a.reasoning_tokens + b.reasoning_tokens,
        a.total + b.total,
    )


def subset(actual: dict[str, Any], expected: dict[str, int]) -> dict[str, Any]:
    return {name: actual.get(name) for name in expected}


def rollout_lines(path: str, kind: str) -> list[dict[str, Any]]:
    """The payloads of the rollout file's lines of `type` kind, in order."""
    rows = [json.loads(line) for line in Path(path).read_text().splitlines()]
    return [row["payload"] for row in rows if row.get("type") == kind]


def last_input_type(request: ModelRequest) -> str | None:
    items = request.body.get("input") or []
    return items[-1].get("type") if items else None


def rollout_token_counts(path: str) -> list[dict[str, Any]]:
    """The `info` of each token_count event line that has one, in order."""
    infos = []
    for line in Path(path).read_text().splitlines():
        row = json.loads(line)
        payload = row.get("payload") or {}
        is_count = row.get("type") == "event_msg" and payload.get("type") == "token_count"
        if is_count and payload.get("info") is not None:
            infos.append(payload["info"])
    return infos


async def test_turn_answer_is_the_final_answer_message_of_the_contract_instance(
    host: Rpc, mock_model: MockModel, tmp_path: Path
) -> None:
    """spec: HARV-2"""
    thread = await start_thread(host, tmp_path)
    turn = await run_turn(host, thread["id"], turn_text("x.1/t1-a1"))

    assert turn["status"] == "completed"
    assert turn["error"] is None
    [read] = (await read_turns(host, thread["id"]))["turns"]
    [message] = agent_messages(read)
    assert message["phase"] == "final_answer"
    assert json.loads(message["text"]) == example_instance(SCHEMA)
    [request] = [r for r in mock_model.requests if r.reply is not None]
    assert request.user_text.splitlines()[:2] == ["crw-flow-op: x.1/t1-a1", "CRW-ROLE: executor"]
    assert request.body["model"] == "gpt-5.5"


async def test_scripted_invalid_answer_then_valid_answer_on_repair(
    host: Rpc, mock_model: MockModel, tmp_path: Path
) -> None:
    """spec: HARV-9"""
    mock_model.script("x.1/", invalid(), valid())
    thread = await start_thread(host, tmp_path)
    await run_turn(host, thread["id"], turn_text("x.1/t1-a1"))
    await run_turn(host, thread["id"], turn_text("x.1/t2-a1"))

    turns = (await read_turns(host, thread["id"]))["turns"]
    answers = [json.loads(agent_messages(turn)[-1]["text"]) for turn in turns]
    validator = jsonschema.Draft202012Validator(SCHEMA)
    assert [validator.is_valid(answer) for answer in answers] == [False, True]


async def test_turn_output_schema_is_answered_when_text_has_no_contract(
    host: Rpc, tmp_path: Path
) -> None:
    thread = await start_thread(host, tmp_path)
    turn = await run_turn(host, thread["id"], "crw-flow-op: y.1/t1-a1\n", outputSchema=SCHEMA)

    assert json.loads(agent_messages(turn)[-1]["text"]) == example_instance(SCHEMA)


async def test_token_counts_are_the_model_usage_and_cumulate_over_turns(
    host: Rpc, mock_model: MockModel, tmp_path: Path
) -> None:
    """spec: HARV-25"""
    first, second = Usage(1200, 300, 80, 20), Usage(1500, 1000, 40, 0, total_tokens=1541)
    mock_model.script("x.1/t1-a1", text('prose {"files": ["a"], "done": true}', usage=first))
    mock_model.script("x.1/t2-a1", valid(usage=second))
    thread = await start_thread(host, tmp_path)
    turn1 = await run_turn(host, thread["id"], turn_text("x.1/t1-a1"))
    turn2 = await run_turn(host, thread["id"], turn_text("x.1/t2-a1"))

    both = plus(first, second)
    for turn, last, total in ((turn1, first, first), (turn2, second, both)):
        update = await host.until("thread/tokenUsage/updated", of_turn(turn["id"]))
        assert subset(update["tokenUsage"]["last"], camel_parts(last)) == camel_parts(last)
        assert subset(update["tokenUsage"]["total"], camel_parts(total)) == camel_parts(total)
    [info1, info2] = rollout_token_counts(thread["path"])
    assert subset(info1["total_token_usage"], snake_parts(first)) == snake_parts(first)
    assert subset(info2["last_token_usage"], snake_parts(second)) == snake_parts(second)
    assert subset(info2["total_token_usage"], snake_parts(both)) == snake_parts(both)
    records = rollout_lines(thread["path"], "token_usage_record")
    usages = [subset(record["usage"], snake_parts(first)) for record in records]
    assert usages == [snake_parts(first), snake_parts(second)]


async def test_failed_turn_reemits_the_unchanged_token_counts(
    host: Rpc, mock_model: MockModel, tmp_path: Path
) -> None:
    """A failed response counts nothing, yet codex sends the failed turn an update
    whose `last` is the previous response's: summing `last` a turn counts it twice.
    spec: HARV-25"""
    first = Usage(100, 10, 5, 1)
    mock_model.script("x.1/t1-a1", valid(usage=first))
    mock_model.script("x.1/t2-a1", fail("insufficient_quota"))
    thread = await start_thread(host, tmp_path)
    await run_turn(host, thread["id"], turn_text("x.1/t1-a1"))
    failed = await run_turn(host, thread["id"], turn_text("x.1/t2-a1"))

    update = await host.until("thread/tokenUsage/updated", of_turn(failed["id"]))
    assert subset(update["tokenUsage"]["last"], camel_parts(first)) == camel_parts(first)
    assert subset(update["tokenUsage"]["total"], camel_parts(first)) == camel_parts(first)
    assert len(rollout_lines(thread["path"], "token_usage_record")) == 1


async def test_context_window_failure_sets_the_total_to_the_window_then_compacts(
    host: Rpc, mock_model: MockModel, tmp_path: Path
) -> None:
    """After contextWindowExceeded the thread's total is the window with every part 0
    (totals are not monotonic), and the next turn starts with a compaction request.
    spec: HARV-13"""
    mock_model.script("x.1/t1-a1", fail("context_length_exceeded"))
    thread = await start_thread(host, tmp_path)
    failed = await run_turn(host, thread["id"], turn_text("x.1/t1-a1"))
    await run_turn(host, thread["id"], turn_text("x.1/t2-a1"))

    updates = [
        note["params"]["tokenUsage"]
        for note in host.notes
        if note.get("method") == "thread/tokenUsage/updated"
        and note["params"]["turnId"] == failed["id"]
    ]
    window = updates[-1]["modelContextWindow"]
    zero = camel_parts(Usage(0, 0, 0, 0, total_tokens=window))
    assert subset(updates[-1]["total"], zero) == zero
    prompts = [r.user_text for r in mock_model.requests if r.reply is not None]
    assert prompts[1].startswith("You are performing a CONTEXT CHECKPOINT COMPACTION")
    [_, second] = (await read_turns(host, thread["id"]))["turns"]
    assert second["items"][0]["type"] == "contextCompaction"


async def test_thread_start_config_sets_tmpdir_in_the_thread_shell(
    host: Rpc, mock_model: MockModel, tmp_path: Path
) -> None:
    """spec: STEP-58"""
    shell = calls(FunctionCall("exec_command", {"cmd": "echo T=$TMPDIR"}))
    mock_model.script("x.1/t1-a1", shell, valid())
    thread = await start_thread(host, tmp_path)
    turn = await run_turn(host, thread["id"], turn_text("x.1/t1-a1"))

    assert turn["status"] == "completed"
    [output] = [r for r in mock_model.requests if last_input_type(r) == "function_call_output"]
    assert f"T={tmp_path / 'thread-tmp'}\n" in output.body["input"][-1]["output"]


@pytest.mark.parametrize(
    ("code", "info"),
    [
        ("context_length_exceeded", "contextWindowExceeded"),
        ("insufficient_quota", "usageLimitExceeded"),
    ],
)
async def test_failed_model_response_fails_the_turn_with_its_error_info(
    host: Rpc, mock_model: MockModel, tmp_path: Path, code: str, info: str
) -> None:
    """spec: HARV-11"""
    mock_model.script("x.1/t1-a1", fail(code))
    thread = await start_thread(host, tmp_path)
    turn = await run_turn(host, thread["id"], turn_text("x.1/t1-a1"))

    assert turn["status"] == "failed"
    assert turn["error"]["codexErrorInfo"] == info
    error = await host.until("error", of_turn(turn["id"]))
    assert error["willRetry"] is False
    assert error["error"]["codexErrorInfo"] == info
    assert (await read_turns(host, thread["id"]))["status"] == {"type": "systemError"}
    order = [
        host.position("thread/status/changed", lambda p: p["status"]["type"] == "systemError"),
        host.position("error", of_turn(turn["id"])),
        host.position("turn/completed", lambda p: p["turn"]["id"] == turn["id"]),
    ]
    assert order == sorted(order)


async def test_turn_after_a_failed_turn_makes_the_thread_active_and_completes(
    host: Rpc, mock_model: MockModel, tmp_path: Path
) -> None:
    mock_model.script("x.1/t1-a1", fail("context_length_exceeded"))
    thread = await start_thread(host, tmp_path)
    await run_turn(host, thread["id"], turn_text("x.1/t1-a1"))
    turn = await run_turn(host, thread["id"], turn_text("x.1/t2-a1"))

    assert turn["status"] == "completed"
    statuses = [
        note["params"]["status"]["type"]
        for note in host.notes
        if note.get("method") == "thread/status/changed"
    ]
    assert statuses == ["active", "systemError", "active", "idle"]
    assert (await read_turns(host, thread["id"]))["status"] == {"type": "idle"}


def test_contract_schema_is_the_last_json_block_after_the_last_heading() -> None:
    message = (
        '## Output contract\n```json\n{"type": "string"}\n```\n'
        'repair:\n## Output contract\nAgain.\n```json\n{"type": "integer"}\n```\n'
        '```json\n{"type": "boolean"}\n```\n'
    )
    assert contract_schema(message) == {"type": "boolean"}
    assert contract_schema("no contract here") is None


def test_failing_instance_is_rejected_by_its_schema() -> None:
    schemas: list[dict[str, Any]] = [SCHEMA, {"type": "array"}, {"type": "string"}, {"enum": [[]]}]
    for schema in schemas:
        assert not jsonschema.Draft202012Validator(schema).is_valid(failing_instance(schema))


async def test_fork_and_resume_carry_only_their_own_config_keys(
    mock_model: MockModel, codex_home_dir: Path, tmp_path: Path
) -> None:
    """spec: STEP-58, STEP-59 (why a fork and a resume carry the leaf keys: a fork
    does not inherit its source's, the resume of a loaded thread changes none, and
    a thread a restarted host rebuilds has only what its thread/resume carries)"""
    shell = calls(FunctionCall("exec_command", {"cmd": "echo T=$TMPDIR"}))
    markers = [f"x.1/t{k}-a1" for k in range(1, 6)]
    for marker in markers:
        mock_model.script(marker, shell, valid())
    key = "shell_environment_policy.set.TMPDIR"
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    async with private_app_server(codex_home_dir, tmp_path / "one.log") as transport:
        rpc = await initialized(Rpc(transport))
        start = {"cwd": str(tmp_path), "config": {key: str(first)}}
        thread = (await rpc.request("thread/start", start))["thread"]["id"]
        await run_turn(rpc, thread, turn_text(markers[0]))
        fork = (await rpc.request("thread/fork", {"threadId": thread}))["thread"]["id"]
        await run_turn(rpc, fork, turn_text(markers[1]))
        await rpc.request("thread/resume", {"threadId": thread, "config": {key: str(second)}})
        await run_turn(rpc, thread, turn_text(markers[2]))
    async with private_app_server(codex_home_dir, tmp_path / "two.log") as transport:
        rpc = await initialized(Rpc(transport))
        await rpc.request("thread/resume", {"threadId": thread})
        await run_turn(rpc, thread, turn_text(markers[3]))
    async with private_app_server(codex_home_dir, tmp_path / "three.log") as transport:
        rpc = await initialized(Rpc(transport))
        await rpc.request("thread/resume", {"threadId": thread, "config": {key: str(second)}})
        await run_turn(rpc, thread, turn_text(markers[4]))

    seen = {
        r.user_text.splitlines()[0]: r.body["input"][-1]["output"].split("T=")[1].split("\n")[0]
        for r in mock_model.requests
        if last_input_type(r) == "function_call_output"
    }
    assert seen == {
        f"crw-flow-op: {markers[0]}": str(first),
        f"crw-flow-op: {markers[1]}": "",  # the fork inherits none
        f"crw-flow-op: {markers[2]}": str(first),  # a loaded thread keeps its own
        f"crw-flow-op: {markers[3]}": "",  # rebuilt after a restart: none
        f"crw-flow-op: {markers[4]}": str(second),  # what its thread/resume carries
    }


async def test_a_turns_items_are_dropped_unread_when_ignored(host: Rpc, tmp_path: Path) -> None:
    """codex writes a notification `{"method":"…"` first, so a client that wants no
    items drops them before decoding them, on both framings."""
    transport = host.transport
    assert isinstance(transport, JsonLinesTransport | WebSocketTransport)
    transport.ignore = frozenset({"item/started", "item/completed"})
    thread = await start_thread(host, tmp_path)
    turn = await run_turn(host, thread["id"], turn_text("x.1/t1-a1"))
    assert turn["status"] == "completed"
    assert transport.skipped >= 4  # the user message's and the answer's start and end
    assert not [n for n in host.notes if str(n.get("method")).startswith("item/")]
