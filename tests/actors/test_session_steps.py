"""A session call's steps and harvest, asserted on the rows: the order of a step's
row and files, what a step records, and the engine's outcomes on the session
backend. The harness is `test_session_run`'s: the simulated host, a scripted
owner, one MockClock."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import trio
from trio.testing import MockClock

from crw.actors.journal_writer import JournalWriter
from crw.bus import steps as bus
from crw.engine.run.rundir import RunDir
from crw.journal.log import read_journal
from crw.journal.rows import RowModel
from tests.actors.test_session_run import close_after_first_turn, harness, kinds


def published(rows: list[dict[str, Any]], call: str) -> list[dict[str, Any]]:
    return [r for r in rows if r["row"] == "step_published" and r["call"] == call]


async def test_step_published_is_durable_before_its_packet_and_step_file(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: STEP-21, ROWS-2: when the bus writes a step's files, its
    step_published row (the step's intent, with its conversation_turn) is already
    in the journal, and neither file was there before the row."""
    write_packet = bus.write_packet
    seen: list[tuple[str, bool, bool]] = []

    def write_after_row(
        run: RunDir, step: bus.StepFile, text: str | None, *, durable: bool = False
    ) -> None:
        journal = read_journal(run.journal).rows
        packet, step_file = bus.step_paths(run, step.call, step.k, step.attempt)
        durable = any(
            r["row"] == "step_published" and r.get("marker") == step.marker for r in journal
        )
        seen.append((step.marker, durable, packet.exists() or step_file.exists()))
        write_packet(run, step, text, durable=durable)

    monkeypatch.setattr(bus, "write_packet", write_after_row)
    async with harness(tmp_path) as h:
        await h.script({"marker": "build.1/*"}, invalidFirst=True)
        state, rows = await h.go()
    markers = [m for m, _, _ in seen]
    assert markers == [r["marker"] for r in rows if r["row"] == "step_published"]
    assert "build.1/t2-a1" in markers
    assert all(durable and not there for _, durable, there in seen), seen
    assert [r["conversation_turn"] for r in published(rows, "build.1")] == [1, 2]
    assert state == "ended"


async def test_send_input_step_writes_no_packet_file(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: STEP-27, STEP-39: a send_input step is its message; it has no packet."""
    async with harness(tmp_path) as h:
        await h.script({"marker": "build.1/*"}, invalidFirst=True)
        state, rows = await h.go()
        packet, _ = bus.step_paths(h.run, "build.1", 2, 1)
        spawn_packet, _ = bus.step_paths(h.run, "build.1", 1, 1)
        left = packet.exists(), spawn_packet.exists()
    repair = published(rows, "build.1")[1]
    assert repair["action"] == "send_input" and "packet" not in repair
    assert left == (False, True)
    assert state == "ended"


async def test_repair_on_a_new_subagent_records_the_note_about_earlier_attempts(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: STEP-13, STEP-53: the row records the note, and the packet carries it."""
    async with harness(tmp_path) as h:
        close_after_first_turn(monkeypatch, h, "build.1")
        await h.script({"marker": "build.1/*"}, invalidFirst=True)
        state, rows = await h.go()
        first, repair = published(rows, "build.1")
        packet_text = await trio.Path(repair["packet"]).read_text()
    assert "note" not in first
    assert repair["action"] == "spawn" and repair["k"] == 2
    assert repair["note"] and "new subagent" in repair["note"]
    earlier = packet_text.split("## Earlier attempts", 1)[1].split("## Task", 1)[0]
    assert repair["note"] in earlier
    assert state == "ended"


async def test_usage_limit_on_a_session_turn_pauses_the_run(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: HARV-15, HARV-12, GEN-6"""
    async with harness(tmp_path) as h:
        await h.script({"marker": "explore.1/*"}, fail="usageLimitExceeded")
        state, rows = await h.go()
    assert kinds(rows, "explore.1")[-1] == "held"
    held = [r for r in rows if r["row"] == "held"][-1]
    assert held["reason"] == "paused" and held["error"]
    assert rows[-1]["row"] == "paused" and rows[-1]["reason"] == "usage_limit_exceeded"
    assert kinds(rows, "build.1") == [] and state == "paused"


async def test_other_failure_of_a_session_turn_holds_the_call(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: HARV-15, HARV-14, GEN-6"""
    async with harness(tmp_path) as h:
        await h.script(
            {"marker": "explore.1/*"}, fail={"httpConnectionFailed": {"httpStatusCode": 502}}
        )
        state, rows = await h.go()
    assert kinds(rows, "explore.1")[-1] == "held"
    held = [r for r in rows if r["row"] == "held"][-1]
    assert held["call"] == "explore.1" and held["reason"] == "host_failure"
    assert kinds(rows, "build.1") == [] and state == "waiting_decision"
    assert "ended" not in {r["row"] for r in rows}


async def test_prose_before_the_json_is_extracted_on_a_session_turn(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: HARV-8, HARV-5, HARV-7, GEN-6"""
    async with harness(tmp_path) as h:
        await h.script(
            {"marker": "explore.1/*"}, answer={"files": ["b.py", "a.py"]}, prose="Found:\n"
        )
        state, rows = await h.go()
    done = next(r for r in rows if r["row"] == "completed" and r["call"] == "explore.1")
    assert kinds(rows, "explore.1").count("step_published") == 1  # no repair
    assert done["result"] == {"files": ["b.py", "a.py"]} and done["extracted"] is True
    assert done["raw_text"].startswith("Found:\n")
    assert state == "ended" and rows[-1]["status"] == "completed"


async def test_session_call_has_the_engines_prepared_row_and_one_allocation(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: GEN-4, ROWS-1: prepared (backend: session, the allocation P) comes
    first, and every step and every bind of the call, on whatever subagent, is in
    that one directory."""
    async with harness(tmp_path) as h:
        close_after_first_turn(monkeypatch, h, "build.1")
        await h.script({"marker": "build.1/*"}, invalidFirst=True)
        state, rows = await h.go()
    call_rows = [r for r in rows if r.get("call") == "build.1"]
    prepared = call_rows[0]
    assert prepared["row"] == "prepared" and kinds(rows, "build.1").count("prepared") == 1
    assert (prepared["node"], prepared["role"], prepared["backend"]) == (
        "build",
        "executor",
        "session",
    )
    workspace = prepared["allocation"]["workspace"]
    assert prepared["allocation"]["kind"] == "directory" and workspace.endswith("calls/build.1")
    assert prepared["input_digest"].startswith("sha256:")
    assert {r["workspace"] for r in published(rows, "build.1")} == {workspace}
    started = [r for r in call_rows if r["row"] == "thread_started"]
    assert len({r["thread_id"] for r in started}) == 2
    assert {r["cwd"] for r in started} == {workspace}
    assert state == "ended"


async def test_a_bind_writes_one_thread_started_and_each_turn_its_turn_started(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: ROWS-3, ROWS-5: the attempt's subagent is bound once (its repair is a
    send_input: turn_started only); each turn_started names the host turn that
    carries its step's marker, with its step's conversation_turn."""
    async with harness(tmp_path) as h:
        await h.script({"marker": "build.1/*"}, invalidFirst=True)
        state, rows = await h.go()
        threads = h.sim.state.threads
    (started,) = [r for r in rows if r["row"] == "thread_started" and r["call"] == "build.1"]
    turns = [r for r in rows if r["row"] == "turn_started" and r["call"] == "build.1"]
    steps = published(rows, "build.1")
    assert [t["marker"] for t in turns] == [s["marker"] for s in steps]
    assert [t["conversation_turn"] for t in turns] == [s["conversation_turn"] for s in steps]
    assert [t["k"] for t in turns] == [1, 2] and all(t["attempt"] == 1 for t in turns)
    host_turns = threads[started["thread_id"]].turns
    assert [t["turn_id"] for t in turns] == [t.id for t in host_turns]
    for turn, host_turn in zip(turns, host_turns, strict=True):
        user = next(i for i in host_turn.items if i["type"] == "userMessage")
        assert user["content"][0]["text"].startswith(f"crw-flow-op: {turn['marker']}\n")
    assert state == "ended"


async def test_each_spawn_step_builds_its_packet_once(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: STEP-21, STEP-55: the packet whose digest step_published records is
    the text written to the packet file, built once a spawn step (a resumed process
    builds it again from the row alone)."""
    from crw.engine.steps import packet

    built: list[str] = []
    build = packet.build_packet

    def counted(p: packet.Packet) -> str:
        text = build(p)
        built.append(text)
        return text

    monkeypatch.setattr(packet, "build_packet", counted)
    async with harness(tmp_path) as h:
        state, rows = await h.go()
        spawns = [r for r in rows if r["row"] == "step_published" and r["action"] == "spawn"]
        files = [await trio.Path(r["packet"]).read_text() for r in spawns]
    assert len(built) == len(spawns) >= 2
    assert files == built
    assert state == "ended"


async def test_a_plain_call_commits_three_batches(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: STEP-21, BIND-6: a call answered at its first turn commits prepared with
    its first step's step_published (both durable before P and the step's files),
    its bind, and its terminal row: three commits, three fsyncs at most (four
    before, prepared alone)."""
    batches: list[list[str]] = []
    commit = JournalWriter.commit

    async def counted(self: JournalWriter, rows: list[RowModel], **kwargs: Any) -> list[RowModel]:
        mine = [str(getattr(r, "row", "")) for r in rows if getattr(r, "call", None) == "explore.1"]
        if mine:
            batches.append(mine)
        return await commit(self, rows, **kwargs)

    monkeypatch.setattr(JournalWriter, "commit", counted)
    async with harness(tmp_path) as h:
        state, rows = await h.go()
    assert batches == [
        ["prepared", "step_published"],
        ["thread_started", "turn_started"],
        ["completed"],
    ]
    assert kinds(rows, "explore.1") == [kind for batch in batches for kind in batch]
    assert state == "ended"


async def test_a_plain_call_syncs_nothing_on_the_step_bus(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: HARV-56, STEP-21, ATT-21: a call answered at its first turn syncs
    neither its packet, nor its step file, nor the directories that name them, nor
    the close step written after its terminal row: its step_published row is durable
    before them, and a resumed process writes an unbound step's files again from it
    (a torn packet first) and publishes the close again while the host lists the
    subagent loaded. Three fsyncs on the bus before (packet, its directory, steps/)."""
    synced: list[str] = []
    fsync = os.fsync

    def counted(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        fsync(fd)

    monkeypatch.setattr(os, "fsync", counted)
    async with harness(tmp_path) as h:
        state, _ = await h.go()
    assert state == "ended"
    assert [p for p in synced if p.startswith(str(h.run.steps))] == []
