"""A held App Server call goes on in place (spec: ATT-30..35, STEP-15, STEP-53,
STEP-59, STEP-61): answered retry, or held by a pause when the run resumes, its
thread is resumed with the leaf keys, its running turns are interrupted first, and
its delivered turn is taken again by a new turn on that thread, at the next k, the
replaced turn's conversation place and replaces_turn; a call held in its repair
goes on with that repair; no turn is sent twice.

The harness of `test_app_server_resume`: one simulated host outlives the run
processes, each its own connection and journal writer over one journal, under one
MockClock. The decision row is appended as `crw flow answer` appends it.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import trio
from trio.testing import MockClock

from crw.cli.run.answer import append_row
from crw.engine.answers.answer import digest as answer_digest
from crw.engine.config.workflow import load_workflow
from crw.engine.holds.decision import Choice, Record, decide_answer
from crw.engine.run.rundir import RunDir
from crw.engine.steps import packet, step_input
from crw.journal.replay import replay
from crw.journal.rows import Held, Started, StepPublished
from tests.actors.spies import TurnsAtCommit
from tests.actors.test_app_server_resume import (
    KEY,
    SERIAL,
    TMPDIR,
    Host,
    host,
    kill_after,
    turn_text,
)
from tests.actors.test_app_server_run import kinds

Rows = list[dict[str, Any]]
CALL = "build.1"
FIRST = ["prepared", "step_published", "thread_started", "turn_started"]


def answer(h: Host, choice: Choice = "retry") -> None:
    """Append the decision row as `crw flow answer` does (the harness writes no
    started row, which a run process writes first: it is written here)."""
    run = RunDir(h.run_dir)
    if not any(row["row"] == "started" for row in h.rows()):
        append_row(run, Started(backend="app-server"))
    rows = h.rows()
    mine = [row for row in rows if row.get("call") == CALL]
    verdict = decide_answer(replay(rows), mine, "run", CALL, choice)
    assert isinstance(verdict, Record), verdict
    append_row(run, verdict.row)


def last_end(rows: Rows) -> dict[str, Any]:
    """The call's newest terminal row."""
    ends = ("completed", "null_model", "held")
    return [r for r in rows if r["row"] in ends and r.get("call") == CALL][-1]


def steps(rows: Rows) -> Rows:
    return [r for r in rows if r["row"] == "step_published" and r["call"] == CALL]


def place(row: dict[str, Any]) -> tuple[Any, ...]:
    keys = ("k", "op", "marker", "attempt", "conversation_turn", "replaces_turn")
    return tuple(row.get(key) for key in keys)


def thread_turns(h: Host) -> list[str]:
    """The marker lines of the turns the call's thread ran, in order."""
    turns = h.thread(CALL).wire(include_turns=True)["turns"]
    return [turn_text(t).split("\n", 1)[0] for t in turns]


def timed(h: Host) -> None:
    """build gets a node timeout of 600 s."""
    path = h.run_dir.parent / "timed.toml"
    path.write_text(SERIAL.replace('needs = ["explore"]\n', 'needs = ["explore"]\ntimeout = 600\n'))
    h.workflow = load_workflow(path)


async def held_by_restart(h: Host, nth: int = 1) -> None:
    """The process dies while build's nth turn runs; the host restarts and cuts it
    off; the next process holds the call host_failure."""
    assert await h.process(kill_after("turn_started", nth)) is None
    await h.request("sim/restart", {})
    assert await h.process() == "waiting_decision"


async def test_a_turn_the_host_cut_off_is_taken_again_on_its_thread_when_answered_retry(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: ATT-32, STEP-53, STEP-59, STEP-61"""
    async with host(tmp_path) as h:
        await held_by_restart(h)
        answer(h)
        resumes = h.sim.served.get("thread/resume", 0)
        assert await h.process() == "ended"
        rows = h.rows()
        resumed = h.sim.served.get("thread/resume", 0) - resumes
        on_thread = thread_turns(h)
        sent = h.thread(CALL).wire(include_turns=True)["turns"]
        config = dict(h.thread(CALL).config)
        run_json, workflow = h.run_dir / "run.json", h.workflow.path
        by_marker = h.turns_by_marker()
    assert rows[-1]["row"] == "ended" and rows[-1]["status"] == "completed"
    assert kinds(rows, CALL) == [
        *FIRST,
        "held",
        "decision",
        "step_published",
        "turn_started",
        "completed",
    ]
    assert kinds(rows, CALL).count("thread_started") == 1 and resumed == 1
    assert config == {KEY: TMPDIR}  # the leaf keys again on thread/resume
    _, again = steps(rows)
    assert place(again) == (2, "build.1/t2", "build.1/t2-a2", 2, 1, "build.1/t1-a1")
    assert again["action"] == "send_input" and not again.get("repair")
    bound = [r for r in rows if r["row"] == "turn_started" and r["call"] == CALL][-1]
    assert place(bound) == place(again)
    assert again["note"].startswith(
        "Attempt 1 of this call stopped: the call was held (host_failure: the turn was "
        "interrupted) and was answered retry; this is attempt 2, a new turn on the call's thread."
    )
    assert (
        "- attempt 1: build.1/t1-a1: held (host_failure: the turn was interrupted)"
        in (again["note"])
    )
    assert f"Read `git -C {h.run_dir / 'calls' / CALL} status`" in again["note"]
    assert again["input"].startswith("crw-flow-op: build.1/t2-a2\nCRW-ROLE: executor\n")
    assert again["input"].count("## Task\n") == 1 and "## Repository tools" not in again["input"]
    tools = packet.tools_section(TMPDIR, None, str(run_json), str(workflow))
    assert turn_text(sent[1]) == f"{again['input']}\n{tools}\n"
    assert on_thread == ["crw-flow-op: build.1/t1-a1", "crw-flow-op: build.1/t2-a2"]
    assert set(by_marker.values()) == {1}, by_marker
    end = last_end(rows)
    assert (end["row"], end["k"], end["attempt"]) == ("completed", 2, 2)


async def test_a_call_held_in_its_repair_goes_on_with_that_repair(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: ATT-33, STEP-15, STEP-61"""
    async with host(tmp_path) as h:
        await held_by_restart(h, nth=2)
        answer(h)
        assert await h.process() == "ended"
        rows = h.rows()
        on_thread = thread_turns(h)
        sent = h.thread(CALL).wire(include_turns=True)["turns"]
    assert kinds(rows, CALL) == [
        *FIRST,
        "step_published",
        "turn_started",
        "held",
        "decision",
        "step_published",
        "turn_started",
        "completed",
    ]
    _, repair, again = steps(rows)
    assert place(again) == (3, "build.1/t3", "build.1/t3-a2", 2, 2, "build.1/t2-a1")
    assert again["repair"] is True and again["action"] == "send_input"
    assert "previous_answer" not in again  # named, not copied: the repair's row holds it
    assert again["previous_answer_in"] == repair["marker"] and repair["previous_answer"]
    assert again["repair_errors"] == repair["repair_errors"]
    assert "## Task\n" not in again["input"]  # the task is the thread's first turn
    assert again["input"].startswith(f"crw-flow-op: build.1/t3-a2\n{again['note']}\n\n")
    assert again["input"].endswith(repair["input"].split("\n", 1)[1])  # the repair again
    assert turn_text(sent[2]).rstrip().endswith(f"`TMPDIR={TMPDIR}`")
    assert on_thread == [
        "crw-flow-op: build.1/t1-a1",
        "crw-flow-op: build.1/t2-a1",
        "crw-flow-op: build.1/t3-a2",
    ]
    assert (last_end(rows)["k"], last_end(rows)["attempt"]) == (3, 2)


async def test_a_call_held_in_its_repair_has_no_second_repair(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: ATT-34"""
    async with host(tmp_path) as h:
        await held_by_restart(h, nth=2)
        await h.request(
            "sim/script", {"match": {"marker": "build.1/t3-*"}, "behaviour": {"text": "no"}}
        )
        answer(h)
        assert await h.process() == "ended"
        rows = h.rows()
    assert kinds(rows, CALL)[-4:] == ["decision", "step_published", "turn_started", "null_model"]
    assert last_end(rows)["reason"] == "schema_invalid_after_repair"
    assert len(steps(rows)) == 3


@pytest.mark.parametrize("stop", [None, {"reads": 3}], ids=["at_once", "slowly"])
async def test_a_running_turn_of_the_held_call_is_interrupted_before_it_goes_on(
    tmp_path: Path, autojump_clock: MockClock, stop: dict[str, int] | None
) -> None:
    """spec: ATT-30, ATT-31 (the host was lost while the turn ran: the call was held
    host_failure, and its turn runs on on the shared host; `slowly`: it runs on
    through three reads after the interrupt): the retaken turn's step is written
    only once the old turn stopped"""
    async with host(tmp_path) as h:
        timed(h)  # a turn sent again hangs until the deadline holds the call again
        slow = {"slowStop": stop} if stop else {}
        hang = {"match": {"marker": "build.1/t1-*"}, "behaviour": {"hang": True, **slow}}
        await h.request("sim/script", hang)
        assert await h.process(kill_after("turn_started")) is None
        append_row(RunDir(h.run_dir), Started(backend="app-server"))
        append_row(RunDir(h.run_dir), Held(call=CALL, reason="host_failure", error="gone"))
        answer(h)
        watch = TurnsAtCommit(h.sim)
        assert await h.process(watch.after_commit) == "ended"
        rows = h.rows()
        first = h.thread(CALL).turns[0]
        on_thread = thread_turns(h)
    assert kinds(rows, CALL) == [
        *FIRST,
        "held",
        "decision",
        "interrupt_requested",
        "step_published",
        "turn_started",
        "step_published",
        "turn_started",
        "completed",
    ]  # the retaken turn gives build's first answer, which breaks its schema: one repair
    assert [place(step) for step in steps(rows)[1:]] == [
        (2, "build.1/t2", "build.1/t2-a2", 2, 1, "build.1/t1-a1"),
        (3, "build.1/t3", "build.1/t3-a2", 2, 2, None),
    ]
    requested = next(r for r in rows if r["row"] == "interrupt_requested")
    assert (requested["reason"], requested["op"], requested["attempt"], requested["turn_id"]) == (
        "held",
        "build.1/t1",
        1,
        first.id,
    )
    assert first.status == "interrupted"
    assert watch.of(CALL)[:2] == [
        ("interrupt_requested", ("inProgress",)),
        ("step_published", ("interrupted",)),
    ]
    assert on_thread == [
        "crw-flow-op: build.1/t1-a1",
        "crw-flow-op: build.1/t2-a2",
        "crw-flow-op: build.1/t3-a2",
    ]


@pytest.mark.parametrize("kind", ["step_published", "turn_started"])
async def test_a_retried_call_whose_process_dies_goes_on_with_its_new_turn_once(
    tmp_path: Path, autojump_clock: MockClock, kind: str
) -> None:
    """spec: ATT-35, STEP-59 (the retaken turn's step is looked up by its marker on
    the resumed thread before it is started: never sent twice)"""
    async with host(tmp_path) as h:
        await held_by_restart(h)
        answer(h)
        assert await h.process(kill_after(kind)) is None
        await trio.sleep(120)
        assert await h.process() == "ended"
        rows = h.rows()
        on_thread = thread_turns(h)
    assert kinds(rows, CALL) == [
        *FIRST,
        "held",
        "decision",
        "step_published",
        "turn_started",
        "completed",
    ]
    assert on_thread == ["crw-flow-op: build.1/t1-a1", "crw-flow-op: build.1/t2-a2"]
    assert Counter(r["row"] for r in rows if r.get("call") == CALL)["held"] == 1


async def test_a_call_answered_skip_ends_its_node_and_what_needs_it_never_runs(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """The App Server run takes --skip as the session run does."""
    async with host(tmp_path) as h:
        await held_by_restart(h)
        answer(h, "skip")
        assert await h.process() == "ended"
        rows = h.rows()
        by_marker = h.turns_by_marker()
    assert kinds(rows, CALL)[-2:] == ["held", "decision"]
    assert rows[-1]["row"] == "ended" and rows[-1]["status"] == "failed"
    assert rows[-1]["state"] == {"explore": "completed", "build": "skipped", "review": "unrun"}
    assert by_marker["crw-flow-op: build.1/t1-a1"] == 1 and "review.1" not in str(by_marker)


async def test_a_call_its_deadline_held_goes_on_on_its_thread_when_answered_retry(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: ATT-32 (held deadline: its turn was interrupted and ended; the retaken
    turn, then its repair, run on the same thread within the node's timeout)"""
    async with host(tmp_path) as h:
        timed(h)
        hang = {"match": {"marker": "build.1/t1-*"}, "behaviour": {"hang": True}}
        await h.request("sim/script", hang)
        assert await h.process() == "waiting_decision"
        assert kinds(h.rows(), CALL)[-2:] == ["interrupt_requested", "held"]
        assert last_end(h.rows())["reason"] == "deadline"
        answer(h)
        assert await h.process() == "ended"
        rows = h.rows()
        on_thread = thread_turns(h)
    assert kinds(rows, CALL) == [
        *FIRST,
        "interrupt_requested",
        "held",
        "decision",
        "step_published",
        "turn_started",
        "step_published",
        "turn_started",
        "completed",
    ]  # the retaken turn gives build's first answer, which breaks its schema: one repair
    assert [place(step) for step in steps(rows)[1:]] == [
        (2, "build.1/t2", "build.1/t2-a2", 2, 1, "build.1/t1-a1"),
        (3, "build.1/t3", "build.1/t3-a2", 2, 2, None),
    ]
    assert (last_end(rows)["row"], last_end(rows)["k"], last_end(rows)["attempt"]) == (
        "completed",
        3,
        2,
    )
    assert on_thread == [
        "crw-flow-op: build.1/t1-a1",
        "crw-flow-op: build.1/t2-a2",
        "crw-flow-op: build.1/t3-a2",
    ]


@pytest.mark.parametrize("kind", ["step_published", "turn_started"])
async def test_a_repair_taken_again_names_the_answer_and_a_dead_process_sends_it_whole(
    tmp_path: Path, autojump_clock: MockClock, kind: str
) -> None:
    """spec: ATT-33, ATT-35, STEP-59: the repair taken again on the thread names
    the repair's row (`previous_answer_in`) rather than copying the answer; the
    process that goes on after a death sends the same text, the answer whole, and
    the journal holds the answer once."""
    async with host(tmp_path) as h:
        await held_by_restart(h, nth=2)
        answer(h)
        assert await h.process(kill_after(kind)) is None
        await trio.sleep(120)
        assert await h.process() == "ended"
        rows = h.rows()
        sent = h.thread(CALL).wire(include_turns=True)["turns"]
        journal = await trio.Path(h.run_dir / "journal.jsonl").read_bytes()
    _, repair, again = steps(rows)
    assert again["previous_answer_in"] == repair["marker"] and "previous_answer" not in again
    assert thread_turns(h)[-1] == f"crw-flow-op: {again['marker']}"
    text = turn_text(sent[-1])
    assert text.count(packet.fenced_answer(repair["previous_answer"])) == 1
    assert (
        answer_digest(step_input.of(StepPublished.model_validate(again), rows))
        == (again["input_digest"])
    )
    assert journal.count(json.dumps(repair["previous_answer"])[1:-1].encode()) == 1
    assert last_end(rows)["row"] == "completed"
