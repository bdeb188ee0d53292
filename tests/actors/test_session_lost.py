"""Lost attempts of session calls, end to end on the simulated host (spec: ATT-1..13).

A subagent that vanishes (its thread notLoaded or systemError with its turn ended
interrupted), or that the host stops knowing, loses its attempt: the run writes
session_attempt_lost, publishes the old subagent's close step and spawns the next
attempt in the same allocation, until the attempt budget holds the call.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest
import trio
from trio.testing import MockClock

import tests.actors.test_session_run as session_run
from crw.actors import attempt_watch
from crw.actors.host_reader import HostReader
from crw.actors.journal_writer import open_journal_writer
from crw.bus import inbox as reports
from crw.bus import steps as bus
from crw.engine.calls.lost import HostRead, Unknown
from crw.host.protocol import Thread
from crw.host.transport import HostUnavailable
from crw.journal.log import encode_batch, encode_body, read_journal
from crw.journal.rows import InterruptRequested, RowModel, parse_row
from tests.actors.test_session_resume import (
    RememberingOwner,
    drop_row,
    last,
    run_until_killed,
)
from tests.actors.test_session_run import PROTOCOLS, RUN_ID, Harness, harness, kinds

CALL = "build.1"
Rows = list[dict[str, Any]]


@dataclass
class LostOwner(RememberingOwner):
    """The owner, reporting each step's attempt, with the subagents it closed.
    `stale` writes, before it takes attempt 2 of CALL, a report naming attempt 1's
    subagent, and keeps the run's reply to it."""

    closed: list[str] = field(default_factory=list)
    stale: bool = False
    stale_reply: dict[str, Any] | None = None

    async def _take(self, step: bus.StepFile) -> str:
        if self.stale and (step.call, step.attempt) == (CALL, 2):
            first = self.taken[(CALL, 1, 1)]
            report = reports.Report.new(RUN_ID, CALL, 1, 1, first, "t")
            reports.write_report(self.run, report)
            while self.stale_reply is None:
                await trio.sleep(0.1)
                self.stale_reply = reports.read_reply(self.run, report.id)
        agent = await super()._take(step)
        taken = reports.Report.new(RUN_ID, step.call, step.k, step.attempt, agent, "t")
        reports.write_report(self.run, taken)  # the report names the step's attempt
        return agent


def lost_owner(h: Harness, **args: Any) -> LostOwner:
    h.owner = LostOwner(h.client, h.run, h.owner.thread_id, report=False, v2=h.owner.v2, **args)
    h.sim._methods["sim/closeAgent"] = _recorded_close(h, h.owner)
    return h.owner


def _recorded_close(h: Harness, owner: LostOwner) -> Any:
    """The owner's close_agent on the simulated host, recorded; a thread the host
    no longer knows is closed already."""
    close = h.sim._methods["sim/closeAgent"]

    def closing(conn: Any, params: dict[str, Any]) -> dict[str, Any]:
        owner.closed.append(str(params.get("target")))
        if str(params.get("target")) not in h.sim.state.threads:
            return {}
        return close(conn, params)

    return closing


@dataclass
class Times:
    """The MockClock time at which each row kind of CALL was first committed."""

    at: dict[str, float] = field(default_factory=dict)

    def after_commit(self, rows: Sequence[RowModel]) -> None:
        for row in rows:
            if row.call == CALL:
                self.at.setdefault(str(getattr(row, "row", "")), trio.current_time())


async def go_timed(h: Harness, monkeypatch: pytest.MonkeyPatch) -> tuple[str, Rows, Times]:
    times = Times()
    writer = functools.partial(open_journal_writer, after_commit=times.after_commit)
    with monkeypatch.context() as patch:
        patch.setattr(session_run, "open_journal_writer", writer)
        state, rows = await h.go()
    return state, rows, times


def steps(rows: Rows) -> Rows:
    return [r for r in rows if r["row"] == "step_published" and r.get("call") == CALL]


@PROTOCOLS
@pytest.mark.parametrize("vanish", ["notLoaded", "systemError"])
async def test_a_vanished_subagent_loses_its_attempt_and_the_next_spawns_in_the_same_allocation(
    tmp_path: Path, autojump_clock: MockClock, vanish: str, multi_agent: str
) -> None:
    """spec: ATT-3, ATT-8, ATT-9, ATT-10, ATT-11, ATT-12, ATT-13, STEP-24, ROWS-7 (on
    v2 no close step: an idle child holds no slot)"""
    async with harness(tmp_path, multi_agent=multi_agent) as h:
        owner = lost_owner(h)
        await h.script({"marker": f"{CALL}/t1-a1"}, vanish=vanish)
        state, rows = await h.go()
    assert kinds(rows, CALL) == [
        "prepared",
        "step_published",
        "thread_started",
        "turn_started",
        "session_attempt_lost",
        "step_published",
        "thread_started",
        "turn_started",
        "completed",
    ]
    first, second = steps(rows)
    started = [r for r in rows if r["row"] == "thread_started" and r["call"] == CALL]
    turns = [r for r in rows if r["row"] == "turn_started" and r["call"] == CALL]
    lost = last(rows, "session_attempt_lost")
    assert {k: lost[k] for k in lost if k not in ("seq", "at", "row", "call")} == {
        "attempt": 1,
        "agent_id": started[0]["thread_id"],
        "k": 1,
        "turn_id": turns[0]["turn_id"],
        "reason": "turn_interrupted",
        "host_status": vanish,
        "turn_status": "interrupted",
    }
    assert (started[0]["thread_id"] in owner.closed) == (multi_agent == "v1")  # ATT-9
    workspace = last(rows, "prepared")["allocation"]["workspace"]
    assert second["action"] == "spawn" and (second["k"], second["attempt"]) == (1, 2)
    assert second["marker"] == f"{CALL}/t1-a2" and second["replaces_turn"] == first["marker"]
    assert second["conversation_turn"] == first["conversation_turn"] == 1
    assert first["workspace"] == second["workspace"] == workspace
    assert started[1]["cwd"] == workspace and started[1]["attempt"] == 2
    assert started[1]["thread_id"] != started[0]["thread_id"]
    assert "Attempt 1 of this call was cut off" in second["note"]
    packet = await trio.Path(second["packet"]).read_text()
    assert "Attempt 1 of this call was cut off" in packet
    assert f"Read `git -C {workspace} status` and the diff first" in packet  # executor
    assert kinds(rows, CALL).count("prepared") == 1
    assert state == "ended" and rows[-1]["status"] == "completed"


async def test_a_lost_reader_attempt_note_says_cut_off_without_the_git_status(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: ATT-11, ATT-12"""
    async with harness(tmp_path) as h:
        lost_owner(h)
        await h.script({"marker": "explore.1/t1-a1"}, vanish="notLoaded")
        state, rows = await h.go()
    second = [r for r in rows if r["row"] == "step_published" and r["call"] == "explore.1"][1]
    packet = await trio.Path(second["packet"]).read_text()
    assert "Attempt 1 of this call was cut off" in packet and "git -C" not in second["note"]
    assert state == "ended" and rows[-1]["status"] == "completed"


async def test_past_the_attempt_budget_the_call_is_held_attempts_exhausted(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: ATT-8, ATT-9"""
    async with harness(tmp_path) as h:
        h.settings = replace(h.settings, max_attempts=2)
        owner = lost_owner(h)
        await h.script({"marker": f"{CALL}/*"}, vanish="notLoaded")
        state, rows = await h.go()
        waiting = {close.agent_id for close in bus.list_closes(h.run)}
    assert kinds(rows, CALL) == [
        "prepared",
        *["step_published", "thread_started", "turn_started", "session_attempt_lost"] * 2,
        "held",
    ]
    held = last(rows, "held")
    assert held["reason"] == "attempts_exhausted"
    assert [r["attempt"] for r in rows if r["row"] == "session_attempt_lost"] == [1, 2]
    lost_agents = {r["agent_id"] for r in rows if r["row"] == "session_attempt_lost"}
    assert len(lost_agents) == 2
    assert lost_agents <= set(owner.closed) | waiting  # closed, or its close step waits
    assert state == "waiting_decision" and kinds(rows, "review.1") == []


async def test_an_unknown_thread_is_lost_only_after_lost_after(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: ATT-2, ATT-4, ATT-5, ATT-8"""
    async with harness(tmp_path) as h:
        h.settings = replace(h.settings, lost_after=30.0)
        owner = lost_owner(h)
        await h.script({"marker": f"{CALL}/t1-a1"}, hang=True)
        gone: dict[str, float] = {}

        async def forget() -> None:
            while True:
                await trio.sleep(1)
                if (CALL, 1, 1) in owner.taken:
                    break
            await trio.sleep(5)
            del h.sim.state.threads[owner.taken[(CALL, 1, 1)]]
            gone["at"] = trio.current_time()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(forget)
            state, rows, times = await go_timed(h, monkeypatch)
    lost = last(rows, "session_attempt_lost")
    assert (lost["reason"], lost["host_status"], lost["turn_status"]) == (
        "turn_unchanged",
        "unknown",
        "unknown",
    )
    first_turn = next(r for r in rows if r["row"] == "turn_started" and r["call"] == CALL)
    assert (lost["attempt"], lost["k"], lost["turn_id"]) == (1, 1, first_turn["turn_id"])
    waited = times.at["session_attempt_lost"] - gone["at"]
    # seen gone at the next poll of the thread at most, then LostAfter, then a read once more
    poll, again = h.settings.host_poll_interval, h.settings.poll_interval
    assert 30.0 <= waited <= poll + 30.0 + again + 1, waited
    assert state == "ended" and rows[-1]["status"] == "completed"


@dataclass
class ComesBack:
    """The host forgets the subagent `agent`, then knows it again with its turn
    completed right after the run's first read of it that falls due (LostAfter
    from the first read that did not find it): the read the run takes once more
    before it declares the attempt lost is the first to find it back."""

    h: Harness
    agent: str = ""
    gone: Any = None
    first_unknown: float | None = None
    back_at: float | None = None

    async def read(self, reader: HostReader, thread_id: str) -> HostRead:
        read = await _HOST_READ(reader, thread_id)
        if thread_id != self.agent or not isinstance(read, Unknown):
            return read
        now = trio.current_time()
        if self.first_unknown is None:
            self.first_unknown = now
        elif self.back_at is None and now >= self.first_unknown + self.h.settings.lost_after:
            self.back_at = now
            self.h.sim.state.threads[self.agent] = self.gone
            self.h.sim.turns.end_turn(self.gone, self.gone.turns[-1], "completed")
        return read

    def forget(self) -> None:
        self.gone = self.h.sim.state.threads.pop(self.agent)


_HOST_READ = attempt_watch.host_read


async def test_a_thread_found_again_by_the_read_once_more_is_never_lost(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: ATT-5: the subagent's thread is unknown to the host for LostAfter; the
    read that falls due would lose the attempt, but the run reads the thread once
    more first, and by then the host knows it again with its turn completed: the
    attempt is harvested, never lost, and no second attempt is spawned."""
    async with harness(tmp_path) as h:
        h.settings = replace(h.settings, lost_after=30.0)
        owner = lost_owner(h)
        await h.script({"marker": f"{CALL}/t1-a1"}, answer={"summary": "done"}, hang=True)
        back = ComesBack(h)
        monkeypatch.setattr(attempt_watch, "host_read", back.read)

        async def forget() -> None:
            while True:
                await trio.sleep(1)
                if (CALL, 1, 1) in owner.taken:
                    break
            await trio.sleep(5)
            back.agent = owner.taken[(CALL, 1, 1)]
            back.forget()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(forget)
            state, rows = await h.go()
    assert back.first_unknown is not None and back.back_at is not None
    # Mock-clock times are floats: 79.8 - 49.8 is a hair under 30.0.
    assert back.back_at - back.first_unknown >= 30.0 - 1e-6
    assert "session_attempt_lost" not in kinds(rows, CALL)
    assert kinds(rows, CALL) == [
        "prepared",
        "step_published",
        "thread_started",
        "turn_started",
        "completed",
    ]
    assert last(rows, "thread_started")["thread_id"] == back.agent
    assert len(owner.spawned) == 3  # explore.1, build.1, review.1: one attempt each
    assert state == "ended" and rows[-1]["status"] == "completed"


async def test_an_active_subagent_is_waited_for_past_lost_after(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: ATT-7, ATT-1"""
    async with harness(tmp_path) as h:
        h.settings = replace(h.settings, lost_after=20.0)
        lost_owner(h)
        await h.script({"marker": f"{CALL}/t1-a1"}, seconds=100)
        state, rows = await h.go()
    assert "session_attempt_lost" not in kinds(rows, CALL)
    assert kinds(rows, CALL)[-1] == "completed"
    assert state == "ended" and rows[-1]["status"] == "completed"


async def test_a_report_naming_the_lost_attempt_is_answered_close(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: DISP-14"""
    async with harness(tmp_path) as h:
        owner = lost_owner(h, stale=True)
        await h.script({"marker": f"{CALL}/t1-a1"}, vanish="notLoaded")
        state, rows = await h.go()
    assert owner.stale_reply is not None
    assert (owner.stale_reply["reply"], owner.stale_reply["reason"]) == (
        "close",
        "an attempt that ended (lost)",
    )
    assert kinds(rows, CALL)[4:] == [
        "session_attempt_lost",
        "step_published",
        "thread_started",
        "turn_started",
        "completed",
    ]
    assert state == "ended"


async def test_last_row_turn_started_loses_a_lost_attempt(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: ATT-28"""
    async with harness(tmp_path) as h:
        lost_owner(h)
        await h.script({"marker": f"{CALL}/t1-a1"}, vanish="notLoaded", seconds=100)
        dead = await run_until_killed(h, monkeypatch, "turn_started")
        await trio.sleep(200)  # the subagent vanished while no process ran
        state, rows = await h.go()
    assert kinds(rows[len(dead) :], CALL) == [
        "session_attempt_lost",
        "step_published",
        "thread_started",
        "turn_started",
        "completed",
    ]
    assert last(rows, "session_attempt_lost")["turn_id"] == last(dead, "turn_started")["turn_id"]
    assert state == "ended" and rows[-1]["status"] == "completed"


async def test_last_row_session_attempt_lost_closes_the_old_subagent_and_spawns_the_next(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: ATT-29, STEP-24"""
    async with harness(tmp_path) as h:
        owner = lost_owner(h)
        await h.script({"marker": f"{CALL}/t1-a1"}, vanish="notLoaded")
        dead = await run_until_killed(h, monkeypatch, "session_attempt_lost")
        old = last(dead, "session_attempt_lost")["agent_id"]
        assert old not in owner.closed
        state, rows = await h.go()
    assert kinds(rows[len(dead) :], CALL) == [
        "step_published",
        "thread_started",
        "turn_started",
        "completed",
    ]
    step = last(rows, "step_published")
    assert (step["action"], step["k"], step["attempt"]) == ("spawn", 1, 2)
    assert old in owner.closed
    assert state == "ended" and rows[-1]["status"] == "completed"


async def test_last_row_thread_started_loses_a_subagent_the_host_does_not_know(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: ATT-23"""
    async with harness(tmp_path) as h:
        h.settings = replace(h.settings, lost_after=30.0)
        owner = lost_owner(h)
        await run_until_killed(h, monkeypatch, "thread_started")
        drop_row(h.run.journal, "turn_started", CALL)
        dead = read_journal(h.run.journal).rows
        del h.sim.state.threads[owner.taken[(CALL, 1, 1)]]
        began = trio.current_time()
        state, rows, times = await go_timed(h, monkeypatch)
    assert kinds(rows[len(dead) :], CALL) == [
        "session_attempt_lost",
        "step_published",
        "thread_started",
        "turn_started",
        "completed",
    ]
    lost = last(rows, "session_attempt_lost")
    assert (lost["attempt"], lost.get("turn_id"), lost["host_status"], lost["reason"]) == (
        1,
        None,
        "unknown",
        "turn_unchanged",
    )
    assert times.at["session_attempt_lost"] - began >= 30.0 - 1e-6
    assert state == "ended" and rows[-1]["status"] == "completed"


async def test_the_attempt_after_a_lost_one_starts_with_no_interrupt_intent(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: HARV-39"""
    async with harness(tmp_path) as h:
        lost_owner(h)
        await h.script({"marker": f"{CALL}/t1-a1"}, vanish="notLoaded")
        await run_until_killed(h, monkeypatch, "session_attempt_lost")
        intent = InterruptRequested(call=CALL, reason="paused", op=f"{CALL}/t1", attempt=1)
        insert_before(h.run.journal, "session_attempt_lost", intent)
        dead = read_journal(h.run.journal).rows
        state, rows = await h.go()
    assert kinds(dead, CALL)[-2:] == ["interrupt_requested", "session_attempt_lost"]
    assert kinds(rows[len(dead) :], CALL) == [
        "step_published",
        "thread_started",
        "turn_started",
        "completed",
    ]
    assert last(rows, "turn_started")["attempt"] == 2
    assert state == "ended" and rows[-1]["status"] == "completed"


def insert_before(journal: Path, kind: str, new: RowModel) -> None:
    """Rewrite `journal` with `new` right before its last `kind` row of CALL, each
    row its own batch: a journal whose attempt had an interrupt asked for."""
    rows = read_journal(journal).rows
    index = max(i for i, r in enumerate(rows) if r["row"] == kind and r.get("call") == CALL)
    kept = [parse_row(r) for r in rows]
    kept.insert(index, new)
    journal.write_bytes(
        b"".join(
            encode_batch(seq, str(rows[0]["at"]), [encode_body(row)])
            for seq, row in enumerate(kept, start=1)
        )
    )


async def test_last_row_thread_started_an_unanswered_read_judges_nothing_and_keeps_the_time(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: ATT-24, ATT-6"""
    async with harness(tmp_path) as h:
        h.settings = replace(h.settings, lost_after=20.0)
        owner = lost_owner(h)
        await run_until_killed(h, monkeypatch, "thread_started")
        drop_row(h.run.journal, "turn_started", CALL)
        dead = read_journal(h.run.journal).rows
        agent = owner.taken[(CALL, 1, 1)]
        del h.sim.state.threads[agent]
        began = trio.current_time()
        read = HostReader.read

        async def blind(reader: HostReader, thread_id: str) -> Thread:
            if thread_id == agent and began + 5 <= trio.current_time() < began + 60:
                raise HostUnavailable("the host did not answer thread/read within 60 s")
            return await read(reader, thread_id)

        monkeypatch.setattr(HostReader, "read", blind)
        state, rows, times = await go_timed(h, monkeypatch)
    assert kinds(rows[len(dead) :], CALL)[0] == "session_attempt_lost"
    lost_at = times.at["session_attempt_lost"] - began
    # Not judged while unanswered (LostAfter passed at 20 s), and the time ran from
    # the first answer: lost at the first answered reads after the window, not 20 s on.
    assert 60.0 <= lost_at < 60.0 + 20.0, lost_at
    assert state == "ended" and rows[-1]["status"] == "completed"


async def test_a_lost_repair_turn_is_taken_again_by_a_spawn_that_carries_the_repair(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: STEP-24, ATT-8, ATT-10"""
    async with harness(tmp_path) as h:
        lost_owner(h)
        await h.script({"marker": f"{CALL}/t1-a1"}, invalidFirst=True)
        await h.script({"marker": f"{CALL}/t2-a1"}, vanish="systemError")
        state, rows = await h.go()
    assert kinds(rows, CALL) == [
        "prepared",
        "step_published",
        "thread_started",
        "turn_started",
        "step_published",
        "turn_started",
        "session_attempt_lost",
        "step_published",
        "thread_started",
        "turn_started",
        "completed",
    ]
    _, repair, again = steps(rows)
    lost = last(rows, "session_attempt_lost")
    assert (lost["k"], lost["attempt"], lost["host_status"]) == (2, 1, "systemError")
    assert repair["action"] == "send_input" and again["action"] == "spawn"
    assert (again["k"], again["attempt"], again["conversation_turn"]) == (2, 2, 2)
    assert again["replaces_turn"] == repair["marker"] == f"{CALL}/t2-a1"
    assert "previous_answer" not in again  # named, not copied: the repair's row holds it
    assert again["previous_answer_in"] == repair["marker"] and repair["previous_answer"]
    assert again["repair_errors"] == repair["repair_errors"] and again["repair"] is True
    assert last(rows, "completed")["attempt"] == 2
    assert state == "ended" and rows[-1]["status"] == "completed"
