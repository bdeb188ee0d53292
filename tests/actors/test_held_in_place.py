"""A held session call answered retry goes on in place (spec: ATT-30..35,
STEP-15, STEP-53), and one answered skip ends its node.

The harness of `test_session_run` runs the chain workflow on the simulated host
with a scripted owner under one MockClock; the decision row is appended the way
`crw flow answer` appends it, and a fresh run goes on over the same directory and
host, as the resume the answer starts does.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pytest
from trio.testing import MockClock

import tests.actors.test_session_run as session_run
from crw.actors.host_reader import HostReader
from crw.actors.journal_writer import open_journal_writer
from crw.bus import inbox as reports
from crw.bus import steps as steps_bus
from crw.cli.run.answer import append_row
from crw.engine.holds.decision import Choice, Record, decide_answer
from crw.engine.run.rundir import RunDir
from crw.host.errors import HostRequestError
from crw.journal.log import read_journal
from crw.journal.replay import replay
from crw.journal.rows import Held, Started
from crw.journal.stores import read_run_journal
from tests.actors.spies import TurnsAtCommit
from tests.actors.test_session_lost import lost_owner
from tests.actors.test_session_resume import (
    KillPoint,
    drop_row,
    last,
    marker_turns,
    remembering,
    run_until_killed,
    run_until_owner_took,
)
from tests.actors.test_session_run import RUN_ID, Harness, harness, kinds

Rows = list[dict[str, Any]]
CALL = "build.1"
BOUND = ["step_published", "thread_started", "turn_started"]


def answer(run: RunDir, choice: Choice, call: str = CALL) -> None:
    """Append the decision row as `crw flow answer` does (the harness writes no
    started row, which a run process writes first: it is written here)."""
    if not any(row["row"] == "started" for row in read_run_journal(run.journal).rows):
        append_row(run, Started(backend="session"))
    rows = read_run_journal(run.journal).rows
    mine = [row for row in rows if row.get("call") == call]
    verdict = decide_answer(replay(rows), mine, RUN_ID, call, choice)
    assert isinstance(verdict, Record), verdict
    append_row(run, verdict.row)


def packet_of(step: dict[str, Any]) -> str:
    return Path(step["packet"]).read_text()


async def test_a_delivered_turn_is_taken_again_by_a_new_attempt_whose_packet_says_why(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: ATT-30, ATT-32, STEP-53, STEP-18: the held attempt's turn ended (failed),
    so its subagent runs nothing; the retry spawns attempt 2 at the next k, at the
    conversation turn of the turn it replaces, naming it, and its packet says why
    attempt 1 stopped and lists the call's earlier attempts."""
    async with harness(tmp_path) as h:
        await h.script({"marker": f"{CALL}/t1-a1"}, fail="internalServerError")
        state, held = await h.go()
        assert state == "waiting_decision"
        assert kinds(held, CALL) == ["prepared", *BOUND, "held"]
        answer(h.run, "retry")
        state, rows = await h.go()
    assert kinds(rows[len(held) :], CALL) == ["decision", *BOUND, "completed"]
    decision = last(rows, "decision")
    assert (decision["choice"], decision["reason"]) == ("retry", "host_failure")
    step = last(rows, "step_published")
    assert (step["k"], step["attempt"], step["action"], step["marker"]) == (
        2,
        2,
        "spawn",
        f"{CALL}/t2-a2",
    )
    assert (step["conversation_turn"], step["replaces_turn"]) == (1, f"{CALL}/t1-a1")
    assert "the call was held (host_failure: simulated failure" in step["note"]
    assert f"- attempt 1: {CALL}/t1-a1: held (host_failure: simulated failure" in step["note"]
    assert step["note"] in packet_of(step)
    started = [r for r in rows if r["row"] == "thread_started" and r["call"] == CALL]
    assert [r["attempt"] for r in started] == [1, 2]
    assert started[0]["thread_id"] != started[1]["thread_id"]
    assert last(rows, "completed")["k"] == 2
    assert state == "ended" and rows[-1]["status"] == "completed"


async def test_the_attempt_after_a_retried_then_lost_one_is_the_task_turn_and_lists_both(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: STEP-53, ATT-46: attempt 1 is held and retried; attempt 2 takes the task
    turn again at k=2 and its subagent vanishes; attempt 3, at k=2 on conversation
    turn 1, says nothing of a repair and lists both earlier attempts."""
    async with harness(tmp_path) as h:
        lost_owner(h)
        await h.script({"marker": f"{CALL}/t1-a1"}, fail="internalServerError")
        await h.script({"marker": f"{CALL}/t2-a2"}, vanish="notLoaded")
        state, _ = await h.go()
        assert state == "waiting_decision"
        answer(h.run, "retry")
        state, rows = await h.go()
    third = last(rows, "step_published")
    assert (third["k"], third["attempt"], third["conversation_turn"]) == (2, 3, 1)
    assert "repair turn" not in third["note"] and "repair turn" not in packet_of(third)
    assert f"- attempt 1: {CALL}/t1-a1: held (host_failure: simulated failure" in third["note"]
    assert f"- attempt 2: {CALL}/t2-a2: lost (turn_interrupted)" in third["note"]
    assert third["note"] in packet_of(third)
    assert state == "ended" and rows[-1]["status"] == "completed"


@pytest.mark.parametrize("stop", [None, {"reads": 3}], ids=["at_once", "slowly"])
async def test_a_running_turn_of_a_held_attempt_is_interrupted_before_the_call_goes_on(
    tmp_path: Path,
    autojump_clock: MockClock,
    monkeypatch: pytest.MonkeyPatch,
    stop: dict[str, int] | None,
) -> None:
    """spec: ATT-30, ATT-31: the held attempt's subagent still runs its turn: the
    interrupt's intent is durable first, the turn is interrupted and the thread read
    until it is not active (`slowly`: the turn runs on through three reads after
    the interrupt); only then is the next attempt published, and its turn started."""
    async with harness(tmp_path) as h:
        remembering(h)
        slow = {"slowStop": stop} if stop else {}
        await h.script({"marker": f"{CALL}/t1-a1"}, hang=True, **slow)
        dead = await run_until_killed(h, monkeypatch, "turn_started")
        turn_id = last(dead, "turn_started")["turn_id"]
        agent = last(dead, "thread_started")["thread_id"]
        append_row(h.run, Held(call=CALL, reason="host_failure", error="the host said so"))
        answer(h.run, "retry")
        watch = TurnsAtCommit(h.sim)
        writer = functools.partial(open_journal_writer, after_commit=watch.after_commit)
        monkeypatch.setattr(session_run, "open_journal_writer", writer)
        state, rows = await h.go()
        turn = next(t for t in h.sim.state.threads[agent].turns if t.id == turn_id)
    assert watch.of(CALL) == [
        ("interrupt_requested", ("inProgress",)),
        *((kind, ("interrupted",)) for kind in [*BOUND, "completed"]),
    ]
    assert kinds(rows[len(dead) :], CALL) == [
        "held",
        "decision",
        "interrupt_requested",
        *BOUND,
        "completed",
    ]
    intent = last(rows, "interrupt_requested")
    assert (intent["reason"], intent["op"], intent["attempt"], intent["turn_id"]) == (
        "held",
        f"{CALL}/t1",
        1,
        turn_id,
    )
    assert turn.status == "interrupted"
    assert last(rows, "step_published")["attempt"] == 2
    assert state == "ended" and rows[-1]["status"] == "completed"


async def test_an_interrupt_the_host_refuses_leaves_the_held_call_going_on_in_place(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: ATT-30, ATT-31: the held attempt's turn ends between the read and the
    interrupt, and the host answers the interrupt with an error: the call reads
    the thread again, finds it not active and goes on with the next attempt; the
    run process lives on and the run completes."""
    async with harness(tmp_path) as h:
        remembering(h)
        await h.script({"marker": f"{CALL}/t1-a1"}, hang=True)
        dead = await run_until_killed(h, monkeypatch, "turn_started")
        turn_id = last(dead, "turn_started")["turn_id"]
        append_row(h.run, Held(call=CALL, reason="host_failure", error="the host said so"))
        answer(h.run, "retry")
        refused: list[str] = []

        async def turn_ends_first(reader: HostReader, thread_id: str, turn: str) -> None:
            await reader._client.turn_interrupt(thread_id, turn)  # the turn ends here
            refused.append(turn)
            raise HostRequestError("turn/interrupt", -32600, f"no turn in progress: {turn}")

        monkeypatch.setattr(HostReader, "interrupt", turn_ends_first)
        state, rows = await h.go()
    assert refused == [turn_id]
    assert kinds(rows[len(dead) :], CALL) == [
        "held",
        "decision",
        "interrupt_requested",
        *BOUND,
        "completed",
    ]
    assert last(rows, "interrupt_requested")["turn_id"] == turn_id
    assert last(rows, "step_published")["attempt"] == 2
    assert state == "ended" and rows[-1]["status"] == "completed"


async def _killed_after_next(h: Harness, monkeypatch: pytest.MonkeyPatch, kind: str) -> Rows:
    """Run until the next `kind` row of CALL is durable, then die; the rows left."""
    kill = KillPoint(kind, CALL)
    writer = functools.partial(open_journal_writer, after_commit=kill.after_commit)
    with monkeypatch.context() as patch:
        patch.setattr(session_run, "open_journal_writer", writer)
        with kill.scope:
            await h.go()
    assert kill.scope.cancelled_caught
    return read_journal(h.run.journal).rows


async def _held_in_repair(h: Harness) -> Rows:
    """Run until build.1 is held in its repair turn (the task's answer broke the schema)."""
    await h.script({"marker": f"{CALL}/t1-a1"}, answer={"wrong": 1})
    await h.script({"marker": f"{CALL}/t2-a1"}, fail="internalServerError")
    state, held = await h.go()
    assert state == "waiting_decision"
    assert kinds(held, CALL) == ["prepared", *BOUND, "step_published", "turn_started", "held"]
    return held


async def test_a_call_held_in_its_repair_goes_on_with_that_repair_also_after_a_restart(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: ATT-33, STEP-15, STEP-53: the new attempt is the repair, on a new
    subagent: its packet names the task once, the answer repaired and the repair
    instruction; the process dies right after the step's row and the resumed one
    writes the same packet from the row."""
    async with harness(tmp_path) as h:
        remembering(h)
        held = await _held_in_repair(h)
        answer(h.run, "retry")
        dead = await _killed_after_next(h, monkeypatch, "step_published")
        state, rows = await h.go()
    step = last(dead, "step_published")
    assert (step["k"], step["attempt"], step["action"], step["repair"]) == (3, 2, "spawn", True)
    assert (step["conversation_turn"], step["replaces_turn"]) == (2, f"{CALL}/t2-a1")
    repaired = last(held, "step_published")
    assert repaired["previous_answer"] == '{"wrong": 1}' and "previous_answer" not in step
    assert step["previous_answer_in"] == repaired["marker"]
    assert step["repair_errors"] == repaired["repair_errors"]
    packet = packet_of(step)  # written by the resumed process, from the row alone
    assert packet.count("## Task\n") == 1 and packet.count("Fix it, starting from") == 1
    assert '{"wrong": 1}' in packet and repaired["repair_errors"][0] in packet
    assert "Answer the task again with an object that satisfies the output contract." in packet
    assert kinds(rows[len(held) :], CALL) == ["decision", *BOUND, "completed"]
    assert state == "ended" and rows[-1]["status"] == "completed"


async def test_a_call_held_in_its_repair_has_no_second_repair(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: ATT-34: the repair taken again answers against the schema once more
    and the call ends null_model: no step after it."""
    async with harness(tmp_path) as h:
        held = await _held_in_repair(h)
        await h.script({"marker": f"{CALL}/t3-a2"}, answer={"still": "wrong"})
        answer(h.run, "retry")
        state, rows = await h.go()
    assert kinds(rows[len(held) :], CALL) == ["decision", *BOUND, "null_model"]
    assert last(rows, "null_model")["reason"] == "schema_invalid_after_repair"
    assert state == "ended" and rows[-1]["status"] == "failed"


async def test_a_held_calls_published_unbound_step_is_looked_up_by_its_marker_first(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: ATT-35: the owner spawned the step's subagent and never reported it; the
    call was held before it was bound. The retry binds that subagent to the same
    step: no step is published again and no turn is started twice."""
    async with harness(tmp_path) as h:
        owner = remembering(h, report=False)
        dead = await run_until_owner_took(h, owner, k=1)
        append_row(h.run, Held(call=CALL, reason="paused"))
        answer(h.run, "retry")
        state, rows = await h.go()
        turns = marker_turns(h, f"{CALL}/t1-a1")
    assert kinds(rows[len(dead) :], CALL) == [
        "held",
        "decision",
        "thread_started",
        "turn_started",
        "completed",
    ]
    assert last(rows, "thread_started")["thread_id"] == owner.taken[(CALL, 1, 1)]
    assert turns == 1
    assert state == "ended" and rows[-1]["status"] == "completed"


async def test_a_held_calls_unbound_step_binds_the_report_that_waits_for_it(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: ATT-35: the owner reported the step's subagent after the call was held;
    the retry answers that report bound (the held call goes on with the step), and
    publishes nothing again."""
    async with harness(tmp_path, poll=600) as h:  # the report binds before any lookup
        owner = remembering(h)
        dead = await run_until_owner_took(h, owner, k=1)
        append_row(h.run, Held(call=CALL, reason="paused"))
        answer(h.run, "retry")
        (waiting,) = reports.read_reports(h.run)
        state, rows = await h.go()
        reply = reports.read_reply(h.run, waiting.id)
    assert reply is not None and reply["reply"] == "bound", reply
    assert kinds(rows[len(dead) :], CALL) == [
        "held",
        "decision",
        "thread_started",
        "turn_started",
        "completed",
    ]
    assert last(rows, "thread_started")["thread_id"] == waiting.agent_id
    assert state == "ended" and rows[-1]["status"] == "completed"


@pytest.mark.parametrize("how", ["paused", "retry"])
async def test_a_held_calls_unbound_step_nobody_took_is_published_again_row_first(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    """spec: ATT-35, ATT-21, STEP-21: the call was held (a pause the run resumes
    from, or a deadline answered retry) while its step waited for a spawn nobody
    made. Its marker finds nothing, so the same step is published again: its
    step_published row (k, attempt, marker, input of the first; no call_tokens)
    is committed before the step file is written, then the owner's spawn binds."""
    async with harness(tmp_path) as h:
        dead = await run_until_killed(h, monkeypatch, "step_published")
        append_row(h.run, Started(backend="session"))
        if how == "paused":
            append_row(h.run, Held(call=CALL, reason="paused"))
        else:
            append_row(h.run, Held(call=CALL, reason="deadline"))
            answer(h.run, "retry")
        held = read_journal(h.run.journal).rows
        first = last(dead, "step_published")
        journal_at_write: list[Rows] = []  # the journal as the step file is written

        def write_step_file(run: RunDir, step: Any) -> None:
            journal_at_write.append(read_journal(run.journal).rows)
            real(run, step)

        real = steps_bus.write_step_file
        monkeypatch.setattr(steps_bus, "write_step_file", write_step_file)
        state, rows = await h.go()
    after = kinds(rows[len(held) :], CALL)
    assert after == [*BOUND, "completed"]
    again = last(rows, "step_published")
    same = ("k", "attempt", "op", "marker", "action", "input_digest", "packet")
    assert {k: again.get(k) for k in same} == {k: first.get(k) for k in same}
    assert again["seq"] > len(held) and again.get("call_tokens") is None
    (written,) = journal_at_write[:1]  # the first file written is this step's
    assert written[-1]["seq"] == again["seq"]  # its row durable first, the newest
    assert state == "ended" and rows[-1]["status"] == "completed"


async def test_a_call_held_before_its_first_step_publishes_it_when_retried(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A call held right after its prepared row (a pause before its first step, in
    a journal of an earlier crw, which committed prepared alone) publishes its first
    step in its directory when it is answered retry."""
    async with harness(tmp_path) as h:
        await run_until_killed(h, monkeypatch, "prepared")
        drop_row(h.run.journal, "step_published", CALL)
        dead = read_journal(h.run.journal).rows
        append_row(h.run, Held(call=CALL, reason="paused"))
        answer(h.run, "retry")
        state, rows = await h.go()
    assert kinds(rows[len(dead) :], CALL) == ["held", "decision", *BOUND, "completed"]
    assert last(rows, "step_published")["marker"] == f"{CALL}/t1-a1"
    assert state == "ended" and rows[-1]["status"] == "completed"


async def test_a_call_answered_skip_ends_its_node_and_what_needs_it_never_runs(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """A skipped node has no result: the nodes that need it end unrun, and the run
    ends failed with each node's end."""
    async with harness(tmp_path) as h:
        await h.script({"marker": f"{CALL}/t1-a1"}, fail="internalServerError")
        _, held = await h.go()
        answer(h.run, "skip")
        state, rows = await h.go()
    after = [(r["row"], r.get("call")) for r in rows[len(held) :] if r["row"] != "started"]
    assert after == [
        ("decision", CALL),
        ("ended", None),
    ]
    assert rows[-1]["status"] == "failed"
    assert rows[-1]["state"] == {"explore": "completed", "build": "skipped", "review": "unrun"}
    assert state == "ended"
