"""Review rounds and continuations on the session backend, end to end on the
simulated host with a scripted owner under one MockClock (spec: ATT-37..49,
STEP-25, STEP-54, DISP-21..24, ROWS-4). Each test asserts the rows written."""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path
from typing import Any

import pytest
from trio.testing import MockClock

import tests.actors.test_session_run as session_run
from crw.actors.journal_writer import open_journal_writer
from crw.clock import fixed_clock
from crw.engine.answers import answer
from crw.engine.config.roles import RolePair
from crw.engine.owner.next_view import NextRead, held_calls
from crw.journal.log import encode_batch, encode_body, read_journal
from crw.journal.rows import Started, parse_row
from tests.actors.test_session_resume import KillPoint, remembering
from tests.actors.test_session_run import Harness, harness, kinds

Rows = list[dict[str, Any]]

REVIEWED = """
name = "reviewed"
pool = 2

[[node]]
id = "build"
role = "executor"
task = "Fix the parser."
schema = { type = "object", required = ["summary"], properties = { summary = { type = "string" } } }
review = { role = "reviewer", rounds = ROUNDS }

[[node]]
id = "ship"
role = "explorer"
needs = ["build"]
task = "Ship {build.summary}."
schema = { type = "object", required = ["done"], properties = { done = { type = "boolean" } } }
"""
REJECT = {"verdict": "reject", "findings": ["the summary names no file"]}
FIXED = {"summary": "fixed parser.py"}


async def reviewed(tmp_path: Path, h: Harness, rounds: int = 1) -> None:
    (tmp_path / "wf.toml").write_text(REVIEWED.replace("ROUNDS", str(rounds)))
    await h.script({"marker": "build.2/*"}, answer=REJECT, seconds=1)
    await h.script({"marker": "build.3/*"}, answer=FIXED, seconds=1)


def text(path: str | Path) -> str:
    return Path(path).read_text()


def of(rows: Rows, call: str, kind: str) -> list[dict[str, Any]]:
    return [r for r in rows if r.get("call") == call and r["row"] == kind]


def one(rows: Rows, call: str, kind: str) -> dict[str, Any]:
    found = of(rows, call, kind)
    assert len(found) == 1, (call, kind, found)
    return found[0]


async def test_a_rejection_runs_a_fix_that_continues_the_node_on_a_new_subagent(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: ATT-37, ATT-38, ROWS-4, STEP-25, ATT-40, ATT-41, ATT-45, STEP-54, ATT-42, ATT-46"""
    async with harness(tmp_path) as h:
        await reviewed(tmp_path, h)
        state, rows = await h.go()
        packet = text(one(rows, "build.3", "step_published")["packet"])
    assert state == "ended" and rows[-1]["status"] == "completed"
    body = ["prepared", "step_published", "thread_started", "turn_started", "completed"]
    for call in ("build.1", "build.2", "build.3", "build.4"):
        assert kinds(rows, call) == body
    calls = [r["call"] for r in rows if r["row"] == "prepared"]
    assert calls[:4] == ["build.1", "build.2", "build.3", "build.4"]
    assert one(rows, "build.2", "prepared")["role"] == "reviewer"
    assert one(rows, "build.2", "prepared")["review"] == "build.1"  # the call it judges
    assert [one(rows, c, "prepared").get("review") for c in ("build.1", "build.3")] == [None] * 2
    assert one(rows, "build.2", "completed")["result"] == REJECT
    # The fix: a continuation of build.1, in build.1's workspace, a spawn step
    # on a new subagent with its own thread_started row.
    fix = one(rows, "build.3", "prepared")
    first = one(rows, "build.1", "prepared")
    assert fix["resume"] == "build.1" and fix["role"] == "executor"
    assert fix["allocation"]["workspace"] == first["allocation"]["workspace"]
    step = one(rows, "build.3", "step_published")
    assert (step["k"], step["attempt"], step["action"], step["conversation_turn"]) == (
        1,
        1,
        "spawn",
        1,
    )
    turn = one(rows, "build.3", "turn_started")
    assert (turn["k"], turn["conversation_turn"]) == (1, 1)
    threads = {c: one(rows, c, "thread_started")["thread_id"] for c in ("build.1", "build.3")}
    assert threads["build.1"] != threads["build.3"]
    # The packet: build.1's turn with the input it took, its packet, its answer
    # file, and the findings.
    handle_step = one(rows, "build.1", "step_published")
    assert "## The conversation you go on from" in packet
    assert "### build.1 turn 1 (t1-a1)" in packet
    assert handle_step["input"] in packet
    assert f"The packet of the call you continue: {handle_step['packet']}." in packet
    answer_file = Path(packet.split("Its answer: ", 1)[1].split(".json", 1)[0] + ".json")
    assert json.loads(text(answer_file)) == one(rows, "build.1", "completed")["result"]
    assert "- the summary names no file" in packet
    # The node's result is the accepted answer: the fix's.
    assert one(rows, "build.4", "completed")["result"]["verdict"] == "accept"
    assert rows[-1]["state"]["build"] == "completed"
    ship = one(rows, "ship.1", "step_published")
    assert "fixed parser.py" in text(ship["packet"])


async def test_a_rejection_after_the_last_round_holds_the_review_call(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """A review that rejects after the node's last fix round ends held
    review_rejected, keeping the reviewer's answer; the node's needers never run."""
    async with harness(tmp_path) as h:
        await reviewed(tmp_path, h)
        await h.script({"marker": "build.4/*"}, answer=REJECT, seconds=1)
        state, rows = await h.go()
    assert state == "waiting_decision"
    assert kinds(rows, "build.4")[-1] == "held"
    held = one(rows, "build.4", "held")
    assert held["reason"] == "review_rejected"
    assert held["result"] == REJECT
    assert "the summary names no file" in held["error"]
    assert not of(rows, "build.5", "prepared") and not of(rows, "ship.1", "prepared")
    assert not [r for r in rows if r["row"] == "ended"]


async def test_a_second_fix_continues_the_first_fix_and_its_whole_chain(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: ATT-41, ATT-49"""
    async with harness(tmp_path) as h:
        await reviewed(tmp_path, h, rounds=2)
        await h.script({"marker": "build.4/*"}, answer=REJECT, seconds=1)
        state, rows = await h.go()
        packet = text(one(rows, "build.5", "step_published")["packet"])
    assert state == "ended" and rows[-1]["state"]["build"] == "completed"
    assert [r["call"] for r in rows if r["row"] == "prepared"][:6] == [
        f"build.{n}" for n in range(1, 7)
    ]
    assert one(rows, "build.5", "prepared")["resume"] == "build.3"
    # The record: build.1's turns, then build.3's, each with the input it took.
    first = packet.index("### build.1 turn 1 (t1-a1)")
    second = packet.index("### build.3 turn 1 (t1-a1)")
    assert first < second
    assert one(rows, "build.3", "step_published")["input"] in packet
    # The input digest keeps the handle's thread chain, in order.
    chain = [one(rows, c, "thread_started")["thread_id"] for c in ("build.1", "build.3")]
    task = packet.split("## Task\n\n", 1)[1].rsplit("\n\n## Output contract", 1)[0]
    schema = {
        "type": "object",
        "required": ["summary"],
        "properties": {"summary": {"type": "string"}},
    }
    expected = {"task": task, "schema": schema, "resume": "build.3", "threads": chain}
    assert one(rows, "build.5", "prepared")["input_digest"] == answer.digest(expected)


async def run_until(
    h: Harness, monkeypatch: pytest.MonkeyPatch, kind: str, call: str, **go: Any
) -> Rows:
    """Run until `kind` of `call` is durable, then die (the run sees nothing after)."""
    kill = KillPoint(kind, call)
    writer = functools.partial(open_journal_writer, after_commit=kill.after_commit)
    with monkeypatch.context() as patch:
        patch.setattr(session_run, "open_journal_writer", writer)
        with kill.scope:
            await h.go(**go)
    assert kill.scope.cancelled_caught, f"the run ended before {kind} of {call}"
    return read_journal(h.run.journal).rows


async def a_resumed_process(h: Harness) -> None:
    """The started row a resumed run process commits before it goes on."""
    async with open_journal_writer(h.run.journal, clock=fixed_clock()) as journal:
        await journal.commit([Started(backend="session", process="p2")])


@pytest.mark.parametrize(
    ("kind", "call"),
    [
        ("completed", "build.1"),
        ("completed", "build.2"),
        ("prepared", "build.3"),
        ("step_published", "build.3"),
        ("thread_started", "build.3"),
        ("completed", "build.3"),
        ("turn_started", "build.4"),
    ],
)
async def test_a_process_that_dies_inside_a_round_goes_on_from_its_last_row(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch, kind: str, call: str
) -> None:
    """Every row of a round is journaled: a resumed process runs no call twice,
    spawns no subagent twice and ends as an undisturbed run."""
    async with harness(tmp_path) as h:
        await reviewed(tmp_path, h)
        owner = remembering(h)
        await run_until(h, monkeypatch, kind, call)
        state, rows = await h.go()
    assert state == "ended" and rows[-1]["status"] == "completed"
    body = ["prepared", "step_published", "thread_started", "turn_started", "completed"]
    for node_call in ("build.1", "build.2", "build.3", "build.4"):
        assert kinds(rows, node_call) == body, node_call
    assert len(owner.spawned) == 5  # four build calls and ship, each spawned once
    assert one(rows, "build.4", "completed")["result"]["verdict"] == "accept"
    assert rows[-1]["state"]["build"] == "completed"


async def test_a_fix_in_a_resumed_process_takes_the_checkpoint_branch(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: ATT-39"""
    async with harness(tmp_path) as h:
        await reviewed(tmp_path, h)
        remembering(h)
        await run_until(h, monkeypatch, "completed", "build.2")
        await a_resumed_process(h)
        state, rows = await h.go()
    assert state == "ended"
    assert kinds(rows, "build.3")[:3] == ["prepared", "checkpoint_started", "step_published"]
    checkpoint = one(rows, "build.3", "checkpoint_started")
    assert (checkpoint["handle"], checkpoint["branch"]) == ("build.1", "checkpoint")
    prepared = [r for r in rows if r.get("call") == "build.3"][:2]
    assert prepared[0]["seq"] + 1 == prepared[1]["seq"]  # one batch, before the step


def rewrite(h: Harness, rows: Rows) -> None:
    """The journal as `rows` (a journal an older or another process wrote)."""
    h.run.journal.write_bytes(
        b"".join(
            encode_batch(seq, str(row["at"]), [encode_body(parse_row(row))])
            for seq, row in enumerate(rows, start=1)
        )
    )


def executor(model: str, effort: str | None = None) -> dict[str, RolePair]:
    return {"executor": RolePair(agent_type="executor", model=model, effort=effort)}


async def test_a_continuation_compares_only_the_decided_parts_of_the_pair(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: DISP-21, DISP-22"""
    async with harness(tmp_path) as h:
        await reviewed(tmp_path, h)
        remembering(h)
        rows = await run_until(h, monkeypatch, "completed", "build.2", pairs=executor("m-a"))
        # build.1's subagent ran an effort the role leaves undecided.
        for row in of(rows, "build.1", "thread_started"):
            row["effort"] = "high"
        rewrite(h, rows)
        state, rows = await h.go(pairs=executor("m-a"))
    assert state == "ended" and rows[-1]["state"]["build"] == "completed"
    fix = one(rows, "build.3", "thread_started")
    assert (fix["model"], fix["effort_unchecked"]) == ("m-a", True)
    assert kinds(rows, "build.3")[-1] == "completed"


async def test_a_continuation_of_a_subagent_bound_unchecked_records_the_pair_it_runs(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: DISP-22"""
    async with harness(tmp_path) as h:
        await reviewed(tmp_path, h)
        state, rows = await h.go()
    assert state == "ended"
    assert one(rows, "build.1", "thread_started")["pair_unchecked"] is True
    fix = one(rows, "build.3", "thread_started")
    assert (fix["model"], fix["pair_unchecked"]) == ("sim-model", True)


async def test_a_continuation_whose_decided_pair_differs_is_refused(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: DISP-23"""
    async with harness(tmp_path) as h:
        await reviewed(tmp_path, h)
        owner = remembering(h)
        await run_until(h, monkeypatch, "completed", "build.2", pairs=executor("m-a"))
        state, rows = await h.go(pairs=executor("m-b"))
    assert state == "waiting_decision"
    assert kinds(rows, "build.3") == ["prepared", "held"]
    held = one(rows, "build.3", "held")
    assert held["reason"] == "pair_refused"
    assert "model is m-b" in held["error"] and "ran m-a" in held["error"]
    assert one(rows, "build.3", "prepared")["resume"] == "build.1"
    assert len(owner.spawned) == 2 and not of(rows, "ship.1", "prepared")


async def test_an_older_journal_takes_each_place_from_the_repair_member(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: ATT-47, ATT-42, ATT-45"""
    async with harness(tmp_path) as h:
        await reviewed(tmp_path, h)
        await h.script({"marker": "build.1/*"}, invalidFirst=True, seconds=1)
        remembering(h)
        rows = await run_until(h, monkeypatch, "completed", "build.2")
        # A journal written before the place was recorded, whose repair ran at k 3.
        for row in rows:
            if row.get("call") == "build.1" and row["row"] in ("step_published", "turn_started"):
                row.pop("conversation_turn", None)
                row["k"] = 3 if row["k"] == 2 else row["k"]
        rewrite(h, rows)
        state, rows = await h.go()
        packet = text(one(rows, "build.3", "step_published")["packet"])
    assert state == "ended"
    repair = next(r for r in of(rows, "build.1", "step_published") if r["repair"])
    assert "### build.1 turn 1 (t1-a1)" in packet
    assert "### build.1 turn 2 (t3-a1)" in packet
    assert packet.index("turn 1 (t1-a1)") < packet.index(repair["input"].splitlines()[0])


@pytest.mark.parametrize("recorded", [False, True])
async def test_a_turn_run_again_supersedes_the_turn_it_replaces(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch, recorded: bool
) -> None:
    """spec: ATT-43, ATT-44, ATT-48, ATT-42, ATT-49"""
    async with harness(tmp_path) as h:
        await reviewed(tmp_path, h)
        remembering(h)
        rows = await run_until(h, monkeypatch, "completed", "build.2")
        # build.1's task turn ran again on a second attempt (its first was lost).
        end = rows.index(one(rows, "build.1", "completed"))
        place = {"conversation_turn": 1, "replaces_turn": 1} if recorded else {}
        again = [
            {"row": "step_published", "call": "build.1", "k": 1, "attempt": 2}
            | {"action": "spawn", "input": "crw-flow-op: build.1/t1-a2\nTHE TURN RUN AGAIN"}
            | {"packet": "/p/packet-t1-a2.md", "repair": False}
            | place,
            {"row": "thread_started", "call": "build.1", "thread_id": "t-again", "attempt": 2},
            {"row": "turn_started", "call": "build.1", "k": 1, "attempt": 2, "turn_id": "x"}
            | place,
        ]
        at = rows[end]["at"]
        rewrite(h, rows[:end] + [row | {"at": at} for row in again] + rows[end:])
        state, rows = await h.go()
        packet = text(one(rows, "build.3", "step_published")["packet"])
    assert state == "ended"
    first = of(rows, "build.1", "step_published")[0]
    assert packet.count("### build.1 turn 1") == 1
    assert "### build.1 turn 1 (t1-a2)" in packet and "THE TURN RUN AGAIN" in packet
    assert first["input"] not in packet
    assert "The packet of the call you continue: /p/packet-t1-a2.md." in packet
    task = packet.split("## Task\n\n", 1)[1].rsplit("\n\n## Output contract", 1)[0]
    schema = {
        "type": "object",
        "required": ["summary"],
        "properties": {"summary": {"type": "string"}},
    }
    expected = {"task": task, "schema": schema, "resume": "build.1", "threads": ["t-again"]}
    assert one(rows, "build.3", "prepared")["input_digest"] == answer.digest(expected)


async def fix_effort_run(
    tmp_path: Path, h: Harness, monkeypatch: pytest.MonkeyPatch, handle_ran: str
) -> Rows:
    """build's review asks its fix rounds for effort high; the executor names a
    model and leaves its effort undecided. build.1's subagent is bound
    effort_unchecked and ran `handle_ran`; the run goes on from build.2's answer."""
    await reviewed(tmp_path, h)
    wf = tmp_path / "wf.toml"
    wf.write_text(wf.read_text().replace("rounds = 1 }", 'rounds = 1, fix_effort = "high" }'))
    remembering(h)
    rows = await run_until(h, monkeypatch, "completed", "build.2", pairs=executor("m-a"))
    (handle,) = of(rows, "build.1", "thread_started")
    assert handle["effort_unchecked"] is True
    handle["effort"] = handle_ran
    rewrite(h, rows)
    return rows


async def test_a_fix_effort_equal_to_the_effort_the_handle_ran_goes_on(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: DISP-24, DISP-22: the fix's spawn step asks for the explicit effort (its
    step file's reasoning_effort), which equals the effort build.1's subagent ran:
    the continuation goes on, on a new subagent whose bind records the pair it runs."""
    async with harness(tmp_path) as h:
        dead = await fix_effort_run(tmp_path, h, monkeypatch, handle_ran="high")
        state, rows = await h.go(pairs=executor("m-a"))
    assert state == "ended" and rows[-1]["state"]["build"] == "completed"
    body = ["prepared", "step_published", "thread_started", "turn_started", "completed"]
    assert kinds(rows[len(dead) :], "build.3") == body
    step = one(rows, "build.3", "step_published")
    assert (step["action"], step["model"], step["effort"]) == ("spawn", "m-a", "high")
    assert one(rows, "build.1", "step_published").get("effort") is None  # the node's own
    fix = one(rows, "build.3", "thread_started")
    assert (fix["model"], fix["effort"], fix["effort_unchecked"]) == ("m-a", "high", True)
    assert fix["thread_id"] != one(rows, "build.1", "thread_started")["thread_id"]


async def test_a_fix_effort_that_differs_from_the_effort_the_handle_ran_is_refused(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: DISP-24, DISP-23: build.1's subagent ran effort low; the fix asks for
    high: prepared, then held pair_refused naming both, before any step; nothing is
    spawned, the nodes that need build never run, and next names the reason."""
    async with harness(tmp_path) as h:
        dead = await fix_effort_run(tmp_path, h, monkeypatch, handle_ran="low")
        spawned = len(h.owner.spawned)
        state, rows = await h.go(pairs=executor("m-a"))
    assert state == "waiting_decision"
    assert kinds(rows[len(dead) :], "build.3") == ["prepared", "held"]
    held = one(rows, "build.3", "held")
    assert held["reason"] == "pair_refused"
    assert held["error"] == (
        "the continuation asks effort high (the role leaves it undecided), the subagent "
        f"{one(rows, 'build.1', 'thread_started')['thread_id']} it continues ran effort low"
    )
    assert one(rows, "build.3", "prepared")["resume"] == "build.1"
    assert len(h.owner.spawned) == spawned and not of(rows, "ship.1", "prepared")
    (waiting,) = held_calls(NextRead(run="run-1", rows=rows))
    assert (waiting["call"], waiting["reason"]) == ("build.3", "pair_refused")


async def test_the_packets_a_fix_names_are_synced_and_no_other(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: STEP-54, STEP-21: a fix call's packet names the packet of the call it
    continues, which nothing writes again once that call ended: the packets of a
    reviewed node's call and of its fix calls (a later fix continues a fix) are
    synced; the review call's and a plain call's are not (a resumed process writes
    an unbound step's files again from its row)."""
    synced: list[str] = []
    fsync = os.fsync

    def counted(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        fsync(fd)

    monkeypatch.setattr(os, "fsync", counted)
    async with harness(tmp_path) as h:
        await reviewed(tmp_path, h)
        state, rows = await h.go()
    assert state == "ended" and rows[-1]["status"] == "completed"
    packets = {Path(p).parent.name for p in synced if Path(p).name.startswith(".packet-")}
    assert packets == {"build.1", "build.3"}
