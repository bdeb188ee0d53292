"""`sim/script` behaviours: the pure rules (marker, role, contract, invalid answers)
and each behaviour as a client sees it on the wire."""

from __future__ import annotations

import io
import json
import pathlib
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]
import pytest
import trio
import trio.testing

from crw.host.sim.behaviour import (
    Behaviour,
    Script,
    choose,
    invalid_instance,
    marker_of,
    output_schema,
    role_of,
)
from crw.host.sim.state import RpcError
from tests.host.sim.support import (
    SCHEMA,
    RawClient,
    RpcFailure,
    answer_of,
    connected,
    owner_and_agent,
    task_text,
    text_input,
)

# -- the pure rules


def test_marker_and_role_are_read_from_their_header_lines() -> None:
    text = task_text("build.1/t2-a3", "executor-t1", None)
    assert (marker_of(text), role_of(text)) == ("build.1/t2-a3", "executor-t1")
    assert (marker_of("no header"), role_of("no header")) == (None, None)


def test_output_schema_is_the_last_json_block_after_the_last_contract_line() -> None:
    older = {"type": "object", "required": ["old"]}
    text = "\n".join(
        [
            task_text("a.1/t1-a1", "critic", older),
            "## Output contract",
            "```json",
            '{"type": "string"}',
            "```",
            "```json",
            json.dumps(SCHEMA),
            "```",
        ]
    )
    assert output_schema(text) == SCHEMA


def test_output_schema_is_read_from_the_packet_the_message_names(tmp_path: Path) -> None:
    packet = tmp_path / "p.md"
    packet.write_text(task_text("a.1/t1-a1", "critic", SCHEMA))
    message = (
        f"crw-flow-op: a.1/t1-a1\nRead the task packet {packet} in full and follow it exactly."
    )
    assert output_schema(message) == SCHEMA


def test_the_packet_is_read_without_the_text_file_layer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A spawned agent's packet is read a turn: by its name, with descriptor calls,
    not through a `Path` and `open()`'s text layer (an isatty ioctl and an lseek a
    read)."""
    packet = tmp_path / "p.md"
    packet.write_text(task_text("a.1/t1-a1", "critic", SCHEMA))
    message = f"Read the task packet {packet} in full and follow it exactly."
    made: list[str] = []
    real_open, real_new = io.open, pathlib.Path.__new__

    def opening(*args: Any, **kwargs: Any) -> Any:
        made.append("open")
        return real_open(*args, **kwargs)

    def new_path(cls: type[Path], *args: Any, **kwargs: Any) -> Path:
        made.append("Path")
        return real_new(cls, *args, **kwargs)

    with monkeypatch.context() as patched:
        patched.setattr(io, "open", opening)
        patched.setattr(pathlib.Path, "__new__", new_path)
        schema = output_schema(message)
    assert (schema, made) == (SCHEMA, [])


@pytest.mark.parametrize(
    "text",
    [
        "no contract at all",
        "## Output contract\nno block",
        "## Output contract\n```json\n{not json\n```",
        "Read the task packet /nonexistent/p.md in full and follow it exactly.",
    ],
)
def test_output_schema_is_none_when_there_is_none_to_read(text: str) -> None:
    assert output_schema(text) is None


@pytest.mark.parametrize(
    "schema",
    [
        SCHEMA,
        {"type": "object", "properties": {"a": {"type": "string"}}},
        {"type": "object", "additionalProperties": False},
        {"type": "array"},
    ],
)
def test_invalid_instance_breaks_the_schema(schema: dict[str, Any]) -> None:
    assert not jsonschema.Draft202012Validator(schema).is_valid(invalid_instance(schema))


def test_the_newest_matching_script_wins() -> None:
    old = Script(Behaviour(seconds=1), marker="build.*")
    new = Script(Behaviour(seconds=2), marker="build.1/*")
    other = Script(Behaviour(seconds=3), role="critic")
    scripts = [old, new, other]
    assert choose(scripts, "build.1/t1-a1", {"executor"}).seconds == 2
    assert choose(scripts, "build.2/t1-a1", {"executor"}).seconds == 1
    assert choose(scripts, "build.2/t1-a1", {"critic"}).seconds == 3
    assert choose(scripts, None, {"executor"}) == Behaviour()


@pytest.mark.parametrize(
    "behaviour",
    [
        {"bogus": 1},
        {"phase": "loud"},
        {"vanish": "gone"},
        {"seconds": -1},
        {"tokens": {"x": 1}},
        {"responses": 0},
        {"responses": 1.5},
        {"responses": True},
        {"slowStop": {}},
        {"slowStop": 3},
        {"slowStop": {"reads": -1}},
        {"slowStop": {"reads": 1.5}},
        {"slowStop": {"seconds": -1}},
        {"slowStop": {"turns": 1}},
        {"fail": "other", "lateEnd": -1},
        {"fail": "other", "lateEnd": True},
        {"lateStart": -1},
        {"lateStart": True},
        {"lateStart": "1"},
        {"emptyRollout": -1},
        {"emptyRollout": 1.5},
        {"emptyRollout": True},
    ],
)
def test_a_malformed_behaviour_is_refused(behaviour: dict[str, Any]) -> None:
    with pytest.raises(RpcError):
        Behaviour.from_wire(behaviour)


# -- on the wire


async def _run(
    client: RawClient, behaviour: dict[str, Any] | None, text: str, **turn: Any
) -> tuple[str, dict[str, Any]]:
    """Script every turn with `behaviour`, run one turn of `text`; its thread and turn."""
    if behaviour is not None:
        await client.request("sim/script", {"match": {}, "behaviour": behaviour})
    thread_id = (await client.request("thread/start", {"cwd": "/w"}))["thread"]["id"]
    params = {"threadId": thread_id, "input": text_input(text), **turn}
    started = await client.request("turn/start", params)
    return thread_id, await client.turn_completed(started["turn"]["id"])


TASK = task_text("build.1/t1-a1", "executor", SCHEMA)


async def test_the_default_answer_is_a_valid_final_answer_of_the_schema(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with connected(tmp_path) as (_, client):
        _, turn = await _run(client, None, TASK)
    assert turn["items"][-1]["phase"] == "final_answer"
    jsonschema.validate(answer_of(turn), SCHEMA)
    assert trio.current_time() == pytest.approx(1.0)


async def test_with_no_schema_to_find_the_answer_is_an_empty_object(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with connected(tmp_path) as (_, client):
        _, turn = await _run(client, None, "just chat")
    assert answer_of(turn) == {}


async def test_output_schema_of_turn_start_is_answered(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    schema = {"type": "object", "required": ["n"], "properties": {"n": {"type": "integer"}}}
    async with connected(tmp_path) as (_, client):
        _, turn = await _run(client, None, "no contract here", outputSchema=schema)
    assert answer_of(turn) == {"n": 0}


@pytest.mark.parametrize(
    ("behaviour", "text", "phase"),
    [
        ({"answer": {"verdict": "fail"}}, '{"verdict": "fail"}', "final_answer"),
        ({"text": "not json at all"}, "not json at all", "final_answer"),
        ({"answer": [1], "phase": "commentary"}, "[1]", "commentary"),
        ({"answer": [1], "phase": None}, "[1]", None),
        ({"answer": {"a": 1}, "prose": "Here it is."}, 'Here it is.\n\n{"a": 1}', "final_answer"),
    ],
)
async def test_a_scripted_answer_is_the_message_as_scripted(
    tmp_path: Path,
    autojump_clock: trio.testing.MockClock,
    behaviour: dict[str, Any],
    text: str,
    phase: str | None,
) -> None:
    async with connected(tmp_path) as (_, client):
        _, turn = await _run(client, behaviour, TASK)
    assert [(i["text"], i["phase"]) for i in turn["items"]] == [(text, phase)]


async def test_invalid_first_breaks_the_first_answer_of_a_call_then_answers_valid(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with connected(tmp_path) as (_, client):
        script = {"match": {"marker": "build.*"}, "behaviour": {"invalidFirst": True}}
        await client.request("sim/script", script)
        thread_id, first = await _run(client, None, TASK)
        repair = task_text("build.1/t2-a1", "executor", SCHEMA, "Repair it.")
        started = await client.request(
            "turn/start", {"threadId": thread_id, "input": text_input(repair)}
        )
        second = await client.turn_completed(started["turn"]["id"])
    validator = jsonschema.Draft202012Validator(SCHEMA)
    assert not validator.is_valid(answer_of(first))
    assert validator.is_valid(answer_of(second))


async def test_hang_never_ends_the_turn_until_it_is_interrupted(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with connected(tmp_path) as (_, client):
        await client.request(
            "sim/script", {"match": {"role": "executor"}, "behaviour": {"hang": True}}
        )
        thread_id = (await client.request("thread/start", {}))["thread"]["id"]
        params = {"threadId": thread_id, "input": text_input(TASK)}
        turn_id = (await client.request("turn/start", params))["turn"]["id"]
        await trio.sleep(24 * 3600)
        read = await client.request("thread/read", {"threadId": thread_id, "includeTurns": True})
        await client.request("turn/interrupt", {"threadId": thread_id, "turnId": turn_id})
        turn = await client.turn_completed(turn_id)
    assert read["thread"]["turns"][0]["status"] == "inProgress"
    assert (turn["status"], turn["error"], turn["items"]) == ("interrupted", None, [])


async def _interrupted(
    client: RawClient, slow_stop: dict[str, Any]
) -> tuple[str, str, dict[str, Any]]:
    """A hanging turn of a `slowStop` script, run an hour, then interrupted: its
    thread and turn ids, and the interrupt's answer."""
    behaviour = {"hang": True, "answer": {"verdict": "pass"}, "slowStop": slow_stop}
    await client.request("sim/script", {"match": {}, "behaviour": behaviour})
    thread_id = (await client.request("thread/start", {}))["thread"]["id"]
    params = {"threadId": thread_id, "input": text_input(TASK)}
    turn_id = (await client.request("turn/start", params))["turn"]["id"]
    await trio.sleep(3600)
    answer = await client.request("turn/interrupt", {"threadId": thread_id, "turnId": turn_id})
    return thread_id, turn_id, answer


def _shown(read: dict[str, Any]) -> tuple[str, str]:
    return read["thread"]["status"]["type"], read["thread"]["turns"][-1]["status"]


async def test_a_slow_stop_runs_on_through_its_reads_then_completes_interrupted(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """`slowStop {reads: 2}`: the interrupt is answered at once; the two reads after
    it show the thread active and the turn in progress, a second interrupt changes
    nothing, and the third read shows the turn interrupted, its answer kept."""
    async with connected(tmp_path) as (_, client):
        thread_id, turn_id, answer = await _interrupted(client, {"reads": 2})
        read = {"threadId": thread_id, "includeTurns": True}
        first = await client.request("thread/read", read)
        await client.request("turn/interrupt", {"threadId": thread_id, "turnId": turn_id})
        second = await client.request("thread/read", read)
        completed = await client.turn_completed(turn_id)
        third = await client.request("thread/read", read)
    assert answer == {}
    assert _shown(first) == _shown(second) == ("active", "inProgress")
    assert _shown(third) == ("idle", "interrupted")
    assert client.methods(thread_id)[-2:] == ["thread/status/changed", "turn/completed"]
    assert (completed["status"], completed["error"]) == ("interrupted", None)
    assert [i["phase"] for i in completed["items"]] == ["final_answer"]


async def test_a_slow_stop_runs_on_for_its_seconds_then_completes_interrupted(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """`slowStop {seconds: 30}`: read at once and 29 s on, the turn still runs; it
    completes interrupted 30 s after the interrupt, read or not."""
    async with connected(tmp_path) as (_, client):
        thread_id, turn_id, _ = await _interrupted(client, {"seconds": 30})
        sent = trio.current_time()
        read = {"threadId": thread_id, "includeTurns": True}
        first = await client.request("thread/read", read)
        await trio.sleep(29)
        later = await client.request("thread/read", read)
        completed = await client.turn_completed(turn_id)
        ended = trio.current_time() - sent
    assert _shown(first) == _shown(later) == ("active", "inProgress")
    assert completed["status"] == "interrupted"
    assert ended == pytest.approx(30.0)


async def test_a_slow_stop_is_cut_short_by_close_agent(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """close_agent ends a stopping turn at once, as it ends a running one."""
    async with connected(tmp_path) as (_, client):
        thread_id, turn_id, _ = await _interrupted(client, {"reads": 5})
        await client.request("sim/closeAgent", {"target": thread_id})
        completed = await client.turn_completed(turn_id)
        read = await client.request("thread/read", {"threadId": thread_id, "includeTurns": True})
    assert completed["status"] == "interrupted"
    assert _shown(read) == ("notLoaded", "interrupted")


@pytest.mark.parametrize("status", ["notLoaded", "systemError"])
async def test_vanish_leaves_the_thread_in_its_status_and_the_turn_interrupted_without_error(
    tmp_path: Path, autojump_clock: trio.testing.MockClock, status: str
) -> None:
    async with connected(tmp_path) as (_, client):
        thread_id, turn = await _run(client, {"vanish": status}, TASK)
        read = await client.request("thread/read", {"threadId": thread_id})
    assert (turn["status"], turn["error"], turn["items"]) == ("interrupted", None, [])
    assert read["thread"]["status"] == {"type": status}


async def test_seconds_is_how_long_the_turn_takes(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with connected(tmp_path) as (_, client):
        _, turn = await _run(client, {"seconds": 90}, TASK)
    assert turn["durationMs"] == 90_000
    assert trio.current_time() == pytest.approx(90.0)


async def test_responses_work_before_the_answer_each_with_its_token_count(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """A tool-using turn: every `seconds / responses`, a model response, each
    counted; the last one the answer."""
    async with connected(tmp_path) as (_, client):
        thread_id, turn = await _run(client, {"seconds": 8, "responses": 4}, TASK)
        read = await client.request("thread/read", {"threadId": thread_id, "includeTurns": True})
        usages = [
            n["params"]["tokenUsage"] for n in client.notes if n["method"].endswith("Usage/updated")
        ]
    assert turn["durationMs"] == 8_000
    items = read["thread"]["turns"][0]["items"]
    assert [item["type"] for item in items] == [
        "userMessage",
        *["reasoning"] * 3,
        "agentMessage",
    ]
    assert [usage["last"]["inputTokens"] for usage in usages] == [
        100,
        100,
        100,
        len(TASK) // 4 + 100,
    ]
    assert usages[-1]["total"]["inputTokens"] == 300 + len(TASK) // 4 + 100


async def test_scripted_tokens_are_what_the_turn_counts(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    tokens = {"input": 1000, "cachedInput": 400, "output": 50, "reasoningOutput": 20}
    async with connected(tmp_path) as (_, client):
        await _run(client, {"tokens": tokens}, TASK)
        usage = (await client.wait_for("thread/tokenUsage/updated"))["tokenUsage"]
    assert usage["last"] == {
        "totalTokens": 1050,
        "inputTokens": 1000,
        "cachedInputTokens": 400,
        "cacheWriteInputTokens": 0,
        "outputTokens": 50,
        "reasoningOutputTokens": 20,
    }


async def test_default_tokens_follow_the_text_lengths(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with connected(tmp_path) as (_, client):
        _, turn = await _run(client, None, TASK)
        usage = (await client.wait_for("thread/tokenUsage/updated"))["tokenUsage"]
    answer = turn["items"][-1]["text"]
    assert usage["last"]["inputTokens"] == len(TASK) // 4 + 100
    assert usage["last"]["outputTokens"] == len(answer) // 4 + 10


async def test_a_role_script_matches_the_thread_agent_role(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with connected(tmp_path) as (_, client):
        await client.request(
            "sim/script", {"match": {"role": "critic"}, "behaviour": {"text": "ok"}}
        )
        _, agent = await owner_and_agent(client, "critic", "no header")
        read = await client.request("thread/read", {"threadId": agent, "includeTurns": True})
        turn = await client.turn_completed(read["thread"]["turns"][0]["id"])
    assert turn["items"][-1]["text"] == "ok"


async def test_an_empty_rollout_refuses_the_threads_first_reads_as_codex_does(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """`emptyRollout: 2`: the first two reads of the turn's thread, with its turns
    and without, are refused as codex 0.169 refuses a thread whose rollout file is
    made and its first line not yet written (-32603); the third reads it."""
    async with connected(tmp_path) as (_, client):
        await client.request("sim/script", {"match": {}, "behaviour": {"emptyRollout": 2}})
        thread_id = (await client.request("thread/start", {"cwd": "/w"}))["thread"]["id"]
        params = {"threadId": thread_id, "input": text_input(TASK)}
        turn = (await client.request("turn/start", params))["turn"]["id"]
        refused = []
        for turns in (True, False):
            with pytest.raises(RpcFailure) as failure:
                await client.request("thread/read", {"threadId": thread_id, "includeTurns": turns})
            refused.append((failure.value.code, failure.value.message))
        read = await client.request("thread/read", {"threadId": thread_id, "includeTurns": True})
        await client.turn_completed(turn)
    path = read["thread"]["path"]
    assert refused == [
        (-32603, f"rollout at {path} is empty"),
        (-32603, f"failed to read session metadata from {path}: rollout at {path} is empty"),
    ]
    assert read["thread"]["turns"][0]["id"] == turn
