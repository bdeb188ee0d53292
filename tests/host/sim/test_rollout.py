"""The rollout files the simulated host writes, in the real host's layout
(host-protocol.md, The rollout file)."""

from __future__ import annotations

import datetime as _dt
import json
import os
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from crw.host.sim import rollout
from crw.host.sim.rollout import rollout_path
from crw.topdir import spreads_subdirectories
from tests.ext4 import skip_unless_ext4
from tests.host.sim.support import RawClient, connected, owner_and_agent, text_input


def _lines(path: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


def _token_counts(path: str) -> list[dict[str, Any]]:
    return [
        line["payload"]["info"]
        for line in _lines(path)
        if line["type"] == "event_msg" and line["payload"]["type"] == "token_count"
    ]


async def _turn(client: RawClient, thread_id: str, tokens: dict[str, int]) -> None:
    script = {"match": {}, "behaviour": {"tokens": tokens}}
    await client.request("sim/script", script)
    params = {"threadId": thread_id, "input": text_input("go")}
    turn_id = (await client.request("turn/start", params))["turn"]["id"]
    await client.turn_completed(turn_id)


def test_the_path_is_dated_and_names_the_thread(tmp_path: Path) -> None:
    path = rollout_path(tmp_path, "abc", 1795982682.5)
    assert path == tmp_path / "sessions/2026/11/29/rollout-2026-11-29T20-04-42-abc.jsonl"


async def test_a_thread_rollout_opens_with_its_session_meta(tmp_path: Path) -> None:
    async with connected(tmp_path) as (_, client):
        thread = (await client.request("thread/start", {"cwd": "/w"}))["thread"]
    first = _lines(thread["path"])[0]
    assert set(first) == {"timestamp", "ordinal", "type", "payload"}
    assert (first["type"], first["ordinal"]) == ("session_meta", 0)
    assert (first["payload"]["id"], first["payload"]["source"]) == (thread["id"], "vscode")
    assert "parent_thread_id" not in first["payload"]
    assert Path(thread["path"]).is_relative_to(tmp_path / "codex-home" / "sessions")


async def test_a_subagent_rollout_names_its_parent_and_spawn_source(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with connected(tmp_path) as (_, client):
        owner, agent = await owner_and_agent(client, "reviewer")
        thread = (await client.request("thread/read", {"threadId": agent}))["thread"]
    meta = _lines(thread["path"])[0]["payload"]
    assert meta["parent_thread_id"] == owner
    spawned = meta["source"]["subagent"]["thread_spawn"]
    assert (spawned["parent_thread_id"], spawned["agent_role"]) == (owner, "reviewer")


async def test_token_count_lines_carry_the_thread_total_and_the_last_response(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with connected(tmp_path) as (_, client):
        thread = (await client.request("thread/start", {}))["thread"]
        await _turn(client, thread["id"], {"input": 100, "cachedInput": 20, "output": 30})
        await _turn(client, thread["id"], {"input": 50, "output": 5, "reasoningOutput": 2})
        updates = [
            n["params"]["tokenUsage"]
            for n in client.notes
            if n["method"] == "thread/tokenUsage/updated"
        ]
    counts = _token_counts(thread["path"])
    assert [c["last_token_usage"] for c in counts] == [
        {
            "input_tokens": 100,
            "cached_input_tokens": 20,
            "cache_write_input_tokens": 0,
            "output_tokens": 30,
            "reasoning_output_tokens": 0,
            "total_tokens": 130,
        },
        {
            "input_tokens": 50,
            "cached_input_tokens": 0,
            "cache_write_input_tokens": 0,
            "output_tokens": 5,
            "reasoning_output_tokens": 2,
            "total_tokens": 55,
        },
    ]
    assert counts[-1]["total_token_usage"] == {
        "input_tokens": 150,
        "cached_input_tokens": 20,
        "cache_write_input_tokens": 0,
        "output_tokens": 35,
        "reasoning_output_tokens": 2,
        "total_tokens": 185,
    }
    assert [u["total"]["totalTokens"] for u in updates] == [130, 185]
    assert [u["last"]["inputTokens"] for u in updates] == [100, 50]
    ordinals = [line["ordinal"] for line in _lines(thread["path"])]
    assert ordinals == list(range(len(ordinals)))


async def test_a_failed_turn_counts_no_tokens(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with connected(tmp_path) as (_, client):
        await client.request("sim/script", {"match": {}, "behaviour": {"fail": "other"}})
        thread = (await client.request("thread/start", {}))["thread"]
        params = {"threadId": thread["id"], "input": text_input("go")}
        await client.turn_completed((await client.request("turn/start", params))["turn"]["id"])
    assert _token_counts(thread["path"]) == []
    assert "thread/tokenUsage/updated" not in client.methods()


def test_a_record_is_appended_without_reading_the_rollout_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ordinal is the records before it: counted from what this host appended
    while the file is as it left it (a 10,000-call bench had the host read every
    rollout back for each of its records), and again from the file when another
    writer changed it."""
    path = tmp_path / "sessions" / "r.jsonl"
    reads: list[str] = []
    opened = Path.open

    def spying(self: Path, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        if "r" in mode:
            reads.append(mode)
        return opened(self, mode, *args, **kwargs)

    monkeypatch.setattr(Path, "open", spying)
    for n in range(4):
        rollout.append(path, "event_msg", rollout.event("n", n=n), 0.0)
    assert reads == []
    with opened(path, "a") as other:
        other.write('{"ordinal": 4}\n')
    rollout.append(path, "event_msg", rollout.event("n", n=5), 0.0)
    assert len(reads) == 1
    assert [line["ordinal"] for line in _lines(str(path))] == [0, 1, 2, 3, 4, 5]


def _opens_of(path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every os.open of `path` from now on."""
    opens: list[str] = []
    real = os.open

    def counting(file: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if Path(file) == path:
            opens.append(str(file))
        return real(file, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", counting)
    return opens


def test_a_rollout_is_opened_once_for_its_appends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A turn appends five records or more: the host keeps the file open between them."""
    path = tmp_path / "sessions" / "r.jsonl"
    path.parent.mkdir()
    opens = _opens_of(path, monkeypatch)
    try:
        for n in range(4):
            rollout.append(path, "event_msg", rollout.event("n", n=n), 0.0)
    finally:
        rollout.close()
    assert len(opens) == 1
    assert [line["ordinal"] for line in _lines(str(path))] == [0, 1, 2, 3]


def test_a_rollout_replaced_under_the_host_is_opened_again(tmp_path: Path) -> None:
    path = tmp_path / "sessions" / "r.jsonl"
    try:
        rollout.append(path, "event_msg", rollout.event("n", n=0), 0.0)
        path.rename(tmp_path / "old.jsonl")
        path.write_text('{"ordinal": 0}\n')
        rollout.append(path, "event_msg", rollout.event("n", n=1), 0.0)
    finally:
        rollout.close()
    assert [line["ordinal"] for line in _lines(str(path))] == [0, 1]
    assert len(_lines(str(tmp_path / "old.jsonl"))) == 1


def test_the_rollouts_kept_open_are_bounded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(rollout, "MAX_OPEN", 2)
    paths = [tmp_path / f"r{n}.jsonl" for n in range(3)]
    try:
        for path in paths:
            rollout.append(path, "event_msg", rollout.event("n"), 0.0)
        assert list(rollout._OPEN) == [str(path) for path in paths[1:]]
    finally:
        rollout.close()


async def test_closing_an_agent_and_the_host_closes_their_rollouts(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with connected(tmp_path) as (_, client):
        _, agent = await owner_and_agent(client, "reviewer")
        agent_path = (await client.request("thread/read", {"threadId": agent}))["thread"]["path"]
        assert agent_path in rollout._OPEN
        await client.request("sim/closeAgent", {"target": agent})
        assert agent_path not in rollout._OPEN
        assert rollout._OPEN
    assert not rollout._OPEN


def _calls_of(monkeypatch: pytest.MonkeyPatch, *names: str) -> list[str]:
    """Every call of the `os` functions `names` from now on, by name."""
    calls: list[str] = []
    for name in names:
        real = getattr(os, name)

        def spying(*args: Any, _real: Any = real, _name: str = name, **kwargs: Any) -> Any:
            calls.append(_name)
            return _real(*args, **kwargs)

        monkeypatch.setattr(os, name, spying)
    return calls


def test_a_new_rollout_in_an_existing_directory_is_opened_without_a_stat_or_mkdir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A host makes a rollout a thread, all in one day's directory: the first
    record opens the file (its fstat gives the size), the directory is made only
    when the open finds it missing, and records written together are one write."""
    (tmp_path / "sessions").mkdir()
    calls = _calls_of(monkeypatch, "stat", "mkdir", "makedirs", "open", "fstat", "write")
    try:
        records: list[rollout.Record] = [
            ("event_msg", rollout.event("n", n=n), 0.0) for n in range(3)
        ]
        rollout.append_all(tmp_path / "sessions" / "r.jsonl", records)
        assert calls == ["open", "fstat", "write"]
        calls.clear()
        rollout.append(tmp_path / "sessions" / "r.jsonl", "event_msg", rollout.event("n"), 0.0)
        assert calls == ["stat", "write"]
        calls.clear()
        rollout.append(tmp_path / "new" / "day" / "r.jsonl", "event_msg", rollout.event("n"), 0.0)
        assert calls[0] == "open"
        assert calls.count("mkdir") == 2
    finally:
        rollout.close()
    assert [line["ordinal"] for line in _lines(str(tmp_path / "sessions" / "r.jsonl"))] == [
        0,
        1,
        2,
        3,
    ]


def test_a_day_s_directory_is_made_where_its_parents_spread_their_subdirectories(
    tmp_path: Path,
) -> None:
    """The sessions tree a host makes for its first rollout of a day: sessions/,
    the year and the month carry ext4's FS_TOPDIR_FL (so each new year, month
    and day goes to a block group of its own, not beside a tree just removed);
    the day itself, which holds files, does not; nor does CODEX_HOME."""
    skip_unless_ext4(tmp_path)
    home = tmp_path / "codex-home"
    home.mkdir()
    path = rollout_path(home, "t1", 0.0)
    try:
        rollout.append(path, "event_msg", rollout.event("n"), 0.0)
    finally:
        rollout.close()
    day = path.parent
    spread = [d for d in (home, *reversed(day.parents[:3]), day) if spreads_subdirectories(d)]
    assert spread == [home / "sessions", day.parent.parent, day.parent]
    assert _lines(str(path))[0]["ordinal"] == 0


def test_a_day_s_directory_made_meanwhile_by_another_host_is_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two hosts on one CODEX_HOME may both find the day missing: the one that
    makes it second appends to the same directory."""
    path = rollout_path(tmp_path, "t1", 0.0)
    real_mkdir = os.mkdir

    def raced(directory: str, *args: Any, **kwargs: Any) -> None:
        real_mkdir(directory, *args, **kwargs)
        raise FileExistsError(directory)

    monkeypatch.setattr(os, "mkdir", raced)
    try:
        rollout.append(path, "event_msg", rollout.event("n"), 0.0)
    finally:
        rollout.close()
    assert _lines(str(path))[0]["ordinal"] == 0


def test_a_record_is_encoded_without_a_new_c_encoder(
    tmp_path: Path, c_encoders_built: list[object]
) -> None:
    """A record's line is the compact JSON of its timestamp, ordinal, type and
    payload (ASCII, escapes for the rest), made by the one C encoder the module
    keeps: `JSONEncoder.encode` would build one a record (6 a spawned agent)."""
    made = c_encoders_built
    payloads = [rollout.event("user_message", message="é ✓\n", turn_id="t"), {"a": [1, None]}]
    records: list[rollout.Record] = [("event_msg", payloads[0], 0.0), ("x", payloads[1], 1.5)]
    try:
        rollout.append_all(tmp_path / "r.jsonl", records)
    finally:
        rollout.close()
    assert made == []
    stamps = ["1970-01-01T00:00:00.000Z", "1970-01-01T00:00:01.500Z"]
    expected = [
        {"timestamp": stamp, "ordinal": n, "type": kind, "payload": payload}
        for n, (stamp, (kind, payload, _)) in enumerate(zip(stamps, records, strict=True))
    ]
    text = "".join(json.dumps(line, separators=(",", ":")) + "\n" for line in expected)
    assert (tmp_path / "r.jsonl").read_text() == text


async def test_a_spawned_agent_s_records_are_written_once_a_step(
    tmp_path: Path, autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The spawn's step (session_meta, task_started, user_message) and the turn's
    end (agent_message, token_count, task_complete) are one write each."""
    writes: list[tuple[str, list[str]]] = []
    real = rollout.append_all

    def spying(path: Any, records: list[rollout.Record]) -> None:
        writes.append((str(path), [payload.get("type", kind) for kind, payload, _ in records]))
        real(path, records)

    monkeypatch.setattr(rollout, "append_all", spying)
    async with connected(tmp_path) as (_, client):
        await client.request("sim/script", {"match": {}, "behaviour": {"seconds": 0}})
        _, agent = await owner_and_agent(client)
        await client.wait_for("turn/completed", lambda p: p["threadId"] == agent)
        path = (await client.request("thread/read", {"threadId": agent}))["thread"]["path"]
    assert [kinds for written, kinds in writes if written == path] == [
        ["session_meta", "task_started", "user_message"],
        ["agent_message", "token_count", "task_complete"],
    ]
    assert [line["ordinal"] for line in _lines(path)] == list(range(6))


def test_a_record_s_timestamp_formats_its_second_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A step's records fall in one second: a datetime is made and formatted once a
    second, the milliseconds are added to it; a wall that rounds up to the next second is
    stamped with that second, as `datetime.fromtimestamp` rounds it."""
    formatted: list[str] = []

    class Counting(_dt.datetime):
        def strftime(self, fmt: str) -> str:
            formatted.append(fmt)
            return super().strftime(fmt)

    def utc(wall: float) -> _dt.datetime:
        made.append(wall)
        return Counting.fromtimestamp(wall, _dt.UTC)

    made: list[float] = []
    monkeypatch.setattr(rollout, "_utc", utc)
    monkeypatch.setattr(rollout, "_STAMP", [(-1, "")])
    walls = [1795982682.1, 1795982682.25, 1795982682.9999, 1795982682.9999996, 1795982683.5]
    assert [rollout._stamp(wall) for wall in walls] == [
        "2026-11-29T20:04:42.100Z",
        "2026-11-29T20:04:42.250Z",
        "2026-11-29T20:04:42.999Z",
        "2026-11-29T20:04:43.000Z",
        "2026-11-29T20:04:43.500Z",
    ]
    assert (len(made), len(formatted)) == (2, 2)
