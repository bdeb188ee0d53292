"""A node restarted afresh: the call it gives up on is superseded only once its
subagents run nothing, then the node runs again in a new call (spec: ATT-36).

The harness of `test_session_run` runs the chain workflow on the simulated host
with a scripted owner under one MockClock; the process that ran the call dies
(a kill point, or the owner's take it never saw), the decision row is appended
the way `crw flow answer RUN CALL --restart` appends it, and a fresh run goes on
over the same directory and host, as the resume the answer starts does.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pytest
from trio.testing import MockClock

import tests.actors.test_session_run as session_run
from crw.actors.journal_writer import open_journal_writer
from crw.bus import steps as bus
from crw.cli.run.answer import append_row
from crw.engine.holds.decision import Record, decide_answer
from crw.engine.run.rundir import RunDir
from crw.journal.log import read_journal
from crw.journal.replay import replay
from crw.journal.rows import Started
from tests.actors.spies import TurnsAtCommit
from tests.actors.test_app_server_run import CHAIN
from tests.actors.test_review_rounds import FIXED, REJECT, REVIEWED, one
from tests.actors.test_session_resume import (
    TOKENS,
    last,
    marker_turns,
    remembering,
    run_until_killed,
    run_until_owner_took,
)
from tests.actors.test_session_run import RUN_ID, harness, kinds

Rows = list[dict[str, Any]]
CALL, NEW = "build.1", "build.2"
BODY = ["prepared", "step_published", "thread_started", "turn_started", "completed"]
FRESH = {"summary": "built afresh"}


def restart(run: RunDir, call: str = CALL) -> dict[str, Any]:
    """Append the decision row as `crw flow answer RUN CALL --restart` does once no
    process holds the run (the harness writes no started row: it is written here)."""
    if not any(row["row"] == "started" for row in read_journal(run.journal).rows):
        append_row(run, Started(backend="session"))
    rows = read_journal(run.journal).rows
    mine = [row for row in rows if row.get("call") == call]
    verdict = decide_answer(replay(rows), mine, RUN_ID, call, "restart", live=False)
    assert isinstance(verdict, Record), verdict
    append_row(run, verdict.row)
    return verdict.row.model_dump()


def order(rows: Rows, calls: tuple[str, ...] = (CALL, NEW)) -> list[tuple[str, str]]:
    return [(row["row"], row["call"]) for row in rows if row.get("call") in calls]


def packet(step: dict[str, Any]) -> str:
    return Path(step["packet"]).read_text()


def turn_status(h: Any, agent: str, turn_id: str) -> str:
    return str(next(t for t in h.sim.state.threads[agent].turns if t.id == turn_id).status)


async def test_an_open_call_is_superseded_only_after_its_bound_turn_is_interrupted(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: ATT-36, HARV-31: the process died while build.1's subagent ran its
    turn. The restart's process interrupts that turn (its intent durable first),
    reads the thread until it is not active (the turn runs on for 30 s after the
    interrupt), and only then writes superseded {by: build.2} and the new call's
    prepared row; the node's result is build.2's, and the old marker was turned
    once."""
    async with harness(tmp_path) as h:
        remembering(h)
        await h.script({"marker": f"{CALL}/t1-a1"}, hang=True, slowStop={"seconds": 30})
        await h.script({"marker": f"{NEW}/t1-a1"}, answer=FRESH)
        dead = await run_until_killed(h, monkeypatch, "turn_started")
        agent = last(dead, "thread_started")["thread_id"]
        turn_id = last(dead, "turn_started")["turn_id"]
        decision = restart(h.run)
        watch = TurnsAtCommit(h.sim)
        writer = functools.partial(open_journal_writer, after_commit=watch.after_commit)
        monkeypatch.setattr(session_run, "open_journal_writer", writer)
        state, rows = await h.go()
        stopped = turn_status(h, agent, turn_id)
        closed = h.sim.state.threads[agent].status
    assert (decision["choice"], decision["by"]) == ("restart", NEW)
    assert order(rows[len(dead) :]) == [
        ("decision", CALL),
        ("interrupt_requested", CALL),
        ("superseded", CALL),
        *((kind, NEW) for kind in BODY),
    ]
    intent = last(rows, "interrupt_requested")
    assert (intent["reason"], intent["op"], intent["attempt"], intent["turn_id"]) == (
        "restart",
        f"{CALL}/t1",
        1,
        turn_id,
    )
    assert watch.of(CALL) == [  # read until it ran nothing, though it stopped late
        ("interrupt_requested", ("inProgress",)),
        ("superseded", ("interrupted",)),
    ]
    assert stopped == "interrupted" and closed == "notLoaded"  # and its close step taken
    assert last(rows, "superseded")["by"] == NEW
    assert last(rows, "completed", NEW)["result"] == FRESH
    assert "built afresh" in packet(last(rows, "step_published", "review.1"))
    assert state == "ended" and rows[-1]["status"] == "completed"
    assert rows[-1]["state"]["build"] == "completed"
    assert marker_turns(h, f"{CALL}/t1-a1") == 1
    assert replay(rows).calls[CALL].state == "superseded"


async def test_a_subagent_that_took_an_unreported_step_is_found_by_marker_and_stopped(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: ATT-36, HARV-31: the owner spawned build.1's step and never reported it; the
    process died before it saw the subagent. The restart's process retracts the
    step file, finds the subagent by the step's marker on the host, interrupts its
    turn, reads it until it stopped (three reads after the interrupt), and only
    then supersedes build.1: no subagent is bound to it."""
    async with harness(tmp_path) as h:
        owner = remembering(h, report=False)
        await h.script({"marker": f"{CALL}/t1-a1"}, hang=True, slowStop={"reads": 3})
        dead = await run_until_owner_took(h, owner, 1)
        agent = owner.taken[(CALL, 1, 1)]
        turn_id = h.sim.state.threads[agent].turns[0].id
        restart(h.run)
        watch = TurnsAtCommit(h.sim)
        writer = functools.partial(open_journal_writer, after_commit=watch.after_commit)
        monkeypatch.setattr(session_run, "open_journal_writer", writer)
        state, rows = await h.go()
        stopped = turn_status(h, agent, turn_id)
        waiting = [s for s in bus.list_steps(h.run) if s.call == CALL]
    assert kinds(dead, CALL) == ["prepared", "step_published"]
    assert order(rows[len(dead) :]) == [
        ("decision", CALL),
        ("interrupt_requested", CALL),
        ("superseded", CALL),
        *((kind, NEW) for kind in BODY),
    ]
    intent = last(rows, "interrupt_requested")
    assert (intent["op"], intent["attempt"], intent["turn_id"]) == (f"{CALL}/t1", 1, turn_id)
    assert watch.of(CALL) == [
        ("interrupt_requested", ("inProgress",)),
        ("superseded", ("interrupted",)),
    ]
    assert stopped == "interrupted" and waiting == []
    assert marker_turns(h, f"{CALL}/t1-a1") == 1
    assert state == "ended" and rows[-1]["status"] == "completed"


async def test_a_held_reviewed_node_restarts_its_rounds_from_the_new_call(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: ATT-36, ATT-37, ATT-45: build.1 is held; the restart supersedes it and
    the node's chain starts again at build.2: its review build.3 rejects, the fix
    build.4 continues build.2 in build.2's workspace, the review build.5 accepts,
    and the node's result is the fix's answer."""
    async with harness(tmp_path) as h:
        (tmp_path / "wf.toml").write_text(REVIEWED.replace("ROUNDS", "1"))
        await h.script({"marker": f"{CALL}/t1-a1"}, fail="internalServerError")
        await h.script({"marker": "build.3/*"}, answer=REJECT)
        await h.script({"marker": "build.4/*"}, answer=FIXED)
        state, _ = await h.go()
        assert state == "waiting_decision"
        restart(h.run)
        state, rows = await h.go()
    assert kinds(rows, CALL)[-3:] == ["held", "decision", "superseded"]
    for call in ("build.2", "build.3", "build.4", "build.5"):
        assert kinds(rows, call) == BODY
    assert "Review the answer of node build (call build.2)" in packet(
        one(rows, "build.3", "step_published")
    )
    fix = one(rows, "build.4", "prepared")
    assert fix["resume"] == "build.2"
    assert fix["allocation"]["workspace"] == str(h.run.calls / "build.2")
    assert state == "ended" and rows[-1]["status"] == "completed"
    assert "Ship fixed parser.py." in packet(one(rows, "ship.1", "step_published"))
    assert rows[-1]["state"] == {"build": "completed", "ship": "completed"}


async def test_a_superseded_open_call_carries_the_tokens_no_terminal_row_counted(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: ATT-36, HARV-22: the process died right after build.1's repair step;
    the task turn's tokens are in that step's call_tokens and in no terminal row.
    The restart retracts the repair's step (no turn took it), sends nothing to the
    idle subagent, and its superseded row carries those tokens, once."""
    async with harness(tmp_path) as h:
        remembering(h, report=False)
        await h.script({"marker": f"{CALL}/*"}, invalidFirst=True, tokens=TOKENS)
        dead = await run_until_killed(h, monkeypatch, "step_published", nth=2)
        restart(h.run)
        state, rows = await h.go()
        waiting = [s for s in bus.list_steps(h.run) if s.call == CALL]
    repair = last(dead, "step_published")
    assert repair["action"] == "send_input" and repair["call_tokens"]["input"] == 100
    assert order(rows[len(dead) :], (CALL,)) == [("decision", CALL), ("superseded", CALL)]
    assert last(rows, "superseded")["tokens"]["input"] == 100
    assert waiting == [] and marker_turns(h, f"{CALL}/t2-a1") == 0
    spent = replay(rows).spent["input"]
    assert spent == 100 + sum(
        int((r.get("tokens") or {}).get("input", 0)) for r in rows if r["row"] == "completed"
    )
    assert state == "ended" and rows[-1]["status"] == "completed"


async def test_the_tokens_a_superseded_call_carries_count_against_the_ceiling_at_once(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: ATT-36, HARV-22: the process that supersedes build.1 counts the tokens
    its superseded row carries against the run's figure when it writes it: the
    workflow's token_ceiling, reached by them alone, pauses the run before the
    next admission (review.1)."""
    chain = CHAIN.replace("pool = 2\n", "pool = 2\ntoken_ceiling = 100\n")
    async with harness(tmp_path) as h:
        (tmp_path / "wf.toml").write_text(chain)
        remembering(h, report=False)
        await h.script({"marker": f"{CALL}/*"}, invalidFirst=True, tokens=TOKENS)
        for free in ("explore.1/*", f"{NEW}/*"):  # turns that count nothing
            await h.script({"marker": free}, tokens=dict.fromkeys(TOKENS, 0))
        dead = await run_until_killed(h, monkeypatch, "step_published", nth=2)
        restart(h.run)
        state, rows = await h.go()
    assert last(dead, "step_published")["call_tokens"]["input"] == 100
    assert kinds(rows, NEW) == BODY and kinds(rows, "review.1") == []
    paused = rows[-1]
    assert (state, paused["row"], paused["reason"]) == ("paused", "paused", "token_ceiling")
    assert paused["tokens"]["total"] == 110
