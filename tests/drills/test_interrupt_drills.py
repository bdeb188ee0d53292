"""The interrupt drills, in process: a call paused, cancelled or timed out at each
point of its life, on the simulated host with a scripted owner under one MockClock.

Each drill runs the same workflow undisturbed first (its results are the
reference), then stops the call at its point (`scenes.POINTS`) and goes on as a
person would: `resume` after a pause, `answer --retry` after a deadline, nothing
after a cancel; the `kill` drills pause the run and cut its process right after
its first row of the stop (the interrupt's intent, or the held row of a call with
no turn), and a resumed process goes on from the journal alone. Every drill
asserts the rows the spec prescribes, that no marker was turned twice on the host,
and that the run ends with the undisturbed run's results. The drills report their
outcome for the table `conftest.py` prints.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio
from trio.testing import MockClock

from crw.bus import control as requests
from crw.bus import steps as bus
from crw.journal.stores import read_run_journal
from tests.actors.test_held_in_place import answer
from tests.actors.test_session_interrupt import go, host_turn
from tests.actors.test_session_resume import KillPoint
from tests.actors.test_session_run import PROTOCOLS, Harness, harness, kinds
from tests.drills.scenes import POINTS, Point, Rows, results, turned_twice

OPS = ["pause", "cancel", "timeout", "kill"]
TIMEOUT = 600


async def undisturbed(tmp_path: Path, point: Point, multi_agent: str) -> dict[str, Any]:
    await trio.Path(tmp_path).mkdir()
    async with harness(tmp_path, multi_agent=multi_agent) as h:
        await point.script(h, disturbed=False)
        state, rows = await go(h)
    assert state == "ended" and rows[-1]["status"] == "completed"
    return results(rows)


def with_timeout(h: Harness) -> None:
    wf = h.run.root.parent / "wf.toml"
    text = wf.read_text()
    wf.write_text(text.replace('role = "executor"\n', f'role = "executor"\ntimeout = {TIMEOUT}\n'))


async def stopped(h: Harness, point: Point, op: str) -> tuple[str, Rows]:
    """Run until the call is at `point` and stop it by `op`; the state and rows."""
    asked: requests.Op = "cancel" if op == "cancel" else "pause"
    if point.name == "answered":  # the process dies once the turn is bound; the host answers
        await killed(h, point, "turn_started")
        await trio.sleep(400)
        assert host_turn(h, last(read(h), "turn_started", point.call)["turn_id"]).status == (
            "completed"
        )
        if op == "timeout":  # counted again from the resume: the answer is read first
            with_timeout(h)
            return await go(h)
        requests.write_request(h.run, requests.Request.new(h.run.id, asked, "t"))
        if op == "kill":
            await killed(h, point, "interrupt_requested")
        return await go(h)
    if op == "kill":
        first = "interrupt_requested" if point.interrupted else "held"
        await killed(h, point, first, stop_when=point.there())
        return await go(h)
    if op == "timeout":
        with_timeout(h)
        return await go(h)
    return await go(h, stop_when=point.there(), op=asked)


async def killed(h: Harness, point: Point, kind: str, **more: Any) -> None:
    kill = KillPoint(kind, point.call)
    with kill.scope:
        await go(h, after_commit=kill.after_commit, **more)
    assert kill.scope.cancelled_caught, f"the run ended before {kind} of {point.call}"


def read(h: Harness) -> Rows:
    return read_run_journal(h.run.journal).rows


def last(rows: Rows, kind: str, call: str) -> dict[str, Any]:
    return [r for r in rows if r["row"] == kind and r.get("call") == call][-1]


def assert_stopped(h: Harness, point: Point, op: str, state: str, rows: Rows) -> str:
    """The rows of the stop; the held reason."""
    reason = {"pause": "paused", "kill": "paused", "cancel": "cancelled"}.get(op, "deadline")
    mine = kinds(rows, point.call)
    held = last(rows, "held", point.call)
    assert held["reason"] == reason, held
    if point.interrupted:
        assert mine[-2:] == ["interrupt_requested", "held"], mine
        intent = last(rows, "interrupt_requested", point.call)
        assert intent["reason"] == reason
        assert intent["turn_id"] == last(rows, "turn_started", point.call)["turn_id"]
        assert mine.count("interrupt_requested") == 1
        if point.name != "answered":
            assert host_turn(h, intent["turn_id"]).status == "interrupted"
    else:
        assert mine[-2:] == ["step_published", "held"] and "interrupt_requested" not in mine
        assert [s for s in bus.list_steps(h.run) if s.call == point.call] == []
    if op == "cancel":
        assert state == "ended" and [r["row"] for r in rows[-2:]] == ["cancelled", "ended"]
        assert rows[-1]["status"] == "cancelled"
    elif op == "timeout":
        assert state == "waiting_decision"
        assert not any(r["row"] in ("paused", "cancelled", "ended") for r in rows)
    else:
        assert state == "paused" and rows[-1]["row"] == "paused"
        assert requests.read_requests(h.run) == []
    return reason


def subagents_left_open(h: Harness, rows: Rows) -> list[str]:
    """The subagents the rows bound that are neither closed nor given a close step
    (on v2, that still run a turn: an idle child holds no slot and is closed by none)."""
    closes = {c.agent_id for c in bus.list_closes(h.run)}
    bound = {r["thread_id"] for r in rows if r["row"] == "thread_started"}
    if h.owner.v2:
        return sorted(a for a in bound if h.sim.state.threads[a].status == "active")
    return sorted(
        a for a in bound if a not in closes and h.sim.state.threads[a].status != "notLoaded"
    )


@PROTOCOLS
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("point", POINTS, ids=[p.name for p in POINTS])
async def test_a_call_stopped_at_each_point_of_its_life_ends_as_the_undisturbed_run(
    tmp_path: Path,
    autojump_clock: MockClock,
    point: Point,
    op: str,
    multi_agent: str,
    found: dict[str, Any],
) -> None:
    """spec: HARV-28..38, HARV-42, ROWS-6, ATT-30..35 (the held call goes on in place);
    on either multi-agent protocol"""
    reference = await undisturbed(tmp_path / "reference", point, multi_agent)
    async with harness(tmp_path, multi_agent=multi_agent) as h:
        await point.script(h, disturbed=True)
        state, rows = await stopped(h, point, op)
        if (point.name, op) == ("answered", "timeout"):
            assert kinds(rows, point.call)[-2:] == ["turn_started", "completed"]
            assert state == "ended" and results(rows) == reference
            found.update(held="-", end="completed: the answer read, no hold")
            return
        found["held"] = assert_stopped(h, point, op, state, rows)
        if op == "cancel":
            assert subagents_left_open(h, rows) == []
            found["end"] = "cancelled"
            return
        point.release(h)
        if op == "timeout":
            answer(h.run, "retry", point.call)
        state, rows = await go(h)
        twice = turned_twice(h)
    assert state == "ended" and rows[-1]["status"] == "completed", "\n".join(
        str((r["row"], r.get("call"), r.get("k"), r.get("reason"), r.get("error"))) for r in rows
    )
    assert results(rows) == reference
    assert twice == {}
    found["end"] = "completed, same results"
