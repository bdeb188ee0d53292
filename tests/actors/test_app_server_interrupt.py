"""Pause and a node's deadline reaching an App Server call: the run interrupts the
turn on its own thread with turn/interrupt (spec: HARV-28, HARV-30, HARV-31,
HARV-35, ROWS-6). The harness of `test_app_server_run`, with the run's control."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import trio
from trio.testing import MockClock

from crw.actors.app_server_context import CallContext
from crw.actors.app_server_run import run_app_server_calls
from crw.actors.control import RunControl
from crw.actors.journal_writer import open_journal_writer
from crw.bus import control as requests
from crw.clock import fixed_clock
from crw.engine.config.roles import RoleTable
from crw.engine.config.workflow import load_workflow
from crw.engine.run.rundir import RunDir
from crw.journal.log import read_journal
from crw.journal.replay import RunState, replay
from crw.journal.rows import RowModel
from tests.actors.spies import TurnsAtCommit
from tests.actors.test_app_server_run import CHAIN, Harness, harness, kinds

Rows = list[dict[str, Any]]
CALL = "build.1"


async def go(
    h: Harness,
    *,
    pause_at_turn: bool = False,
    after_commit: Callable[[Sequence[RowModel]], None] | None = None,
) -> tuple[str, Rows]:
    """Run the workflow with the run's control; with `pause_at_turn`, a pause is
    asked through the run's inbox once build's turn started."""
    run = RunDir(h.run_dir)
    run.inbox.mkdir(exist_ok=True)
    journal_path = h.run_dir / "journal.jsonl"
    control = RunControl(run=run)
    async with (
        open_journal_writer(
            journal_path, clock=fixed_clock(), after_commit=after_commit
        ) as journal,
        trio.open_nursery() as nursery,
    ):
        ctx = CallContext(
            journal=journal,
            reader=h.reader,
            workflow=load_workflow(h.run_dir.parent / "wf.toml"),
            run_dir=h.run_dir,
            tmpdir="/run/tmp",
            pairs=RoleTable.undecided().roles,
            control=control,
        )
        await nursery.start(control.watch)
        if pause_at_turn:
            nursery.start_soon(_pause_at_turn, run, journal_path)
        state = await run_app_server_calls(ctx, ctx.workflow.pool, RunState())
        nursery.cancel_scope.cancel()
    return state, read_journal(journal_path).rows


async def _pause_at_turn(run: RunDir, journal: Path) -> None:
    while True:
        if any(
            r["row"] == "turn_started" and r["call"] == CALL for r in read_journal(journal).rows
        ):
            break
        await trio.sleep(0.05)
    requests.write_request(run, requests.Request.new(run.id, "pause", "t"))


def host_turn(h: Harness, turn_id: str) -> Any:
    return next(t for th in h.sim.state.threads.values() for t in th.turns if t.id == turn_id)


async def test_pause_interrupts_the_calls_turn_on_its_thread_and_holds_it(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: HARV-28, HARV-31, HARV-35, ROWS-6"""
    async with harness(tmp_path) as h:
        await h.script({"marker": f"{CALL}/*"}, hang=True)
        state, rows = await go(h, pause_at_turn=True)
        turn_id = next(
            r["turn_id"] for r in rows if r["row"] == "turn_started" and r["call"] == CALL
        )
        status = host_turn(h, turn_id).status
    assert state == "paused"
    assert kinds(rows, CALL) == [
        "prepared",
        "step_published",
        "thread_started",
        "turn_started",
        "interrupt_requested",
        "held",
    ]
    requested = next(r for r in rows if r["row"] == "interrupt_requested")
    assert (requested["reason"], requested["op"], requested["attempt"], requested["turn_id"]) == (
        "paused",
        f"{CALL}/t1",
        1,
        turn_id,
    )
    assert status == "interrupted"
    assert next(r for r in rows if r["row"] == "held")["reason"] == "paused"
    assert rows[-1]["row"] == "paused" and "review.1" not in {r.get("call") for r in rows}


async def test_a_paused_call_is_held_only_once_its_turn_on_its_thread_stopped(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: HARV-31: the call's turn runs on for 30 s after the interrupt (a host
    winding down); the run follows it until it has ended, and only then writes the
    held row, then the paused row."""
    async with harness(tmp_path) as h:
        await h.script({"marker": f"{CALL}/*"}, hang=True, slowStop={"seconds": 30})
        watch = TurnsAtCommit(h.sim)
        state, rows = await go(h, pause_at_turn=True, after_commit=watch.after_commit)
    assert state == "paused"
    assert kinds(rows, CALL)[-2:] == ["interrupt_requested", "held"]
    assert watch.of(CALL) == [
        ("interrupt_requested", ("inProgress",)),
        ("held", ("interrupted",)),
    ]
    assert [kind for kind, _, _ in watch.seen[-2:]] == ["held", "paused"]


async def test_a_nodes_timeout_interrupts_its_app_server_call(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: HARV-30, HARV-31"""
    text = CHAIN.replace('needs = ["explore"]\n', 'needs = ["explore"]\ntimeout = 120\n')
    async with harness(tmp_path, text) as h:
        await h.script({"marker": f"{CALL}/*"}, hang=True)
        state, rows = await go(h)
    assert kinds(rows, CALL)[-2:] == ["interrupt_requested", "held"]
    assert next(r for r in rows if r["row"] == "interrupt_requested")["reason"] == "deadline"
    assert next(r for r in rows if r["row"] == "held")["reason"] == "deadline"
    assert state == "waiting_decision"


async def test_a_call_the_pause_held_goes_on_on_its_thread_when_the_run_resumes(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: ATT-32 (as on the session path: the paused turn is taken again by a new
    turn on the call's thread, at the next k and its conversation place)"""
    timed = CHAIN.replace('needs = ["explore"]\n', 'needs = ["explore"]\ntimeout = 600\n')
    async with harness(tmp_path, timed) as h:  # a turn sent again hangs till the deadline
        await h.script({"marker": f"{CALL}/*"}, hang=True)
        state, rows = await go(h, pause_at_turn=True)
        assert state == "paused"
        await h.script({"marker": f"{CALL}/t2-*"}, answer={"summary": "fixed"})
        state, rows = await h.run(replay(rows))
        [thread] = [
            r["thread_id"] for r in rows if r["row"] == "thread_started" and r["call"] == CALL
        ]
        turns = h.sim.state.threads[thread].wire(include_turns=True)["turns"]
    assert state == "ended" and rows[-1]["status"] == "completed"
    assert kinds(rows, CALL)[-5:] == [
        "interrupt_requested",
        "held",
        "step_published",
        "turn_started",
        "completed",
    ]
    again = [r for r in rows if r["row"] == "step_published" and r["call"] == CALL][-1]
    assert (again["marker"], again["conversation_turn"], again["replaces_turn"]) == (
        f"{CALL}/t2-a2",
        1,
        f"{CALL}/t1-a1",
    )
    assert (
        "held (paused: the run was paused (crw flow pause)) and the run was resumed"
        in (again["note"])
    )
    assert [t["items"][0]["content"][0]["text"].split("\n", 1)[0] for t in turns] == [
        f"crw-flow-op: {CALL}/t1-a1",
        f"crw-flow-op: {CALL}/t2-a2",
    ]
