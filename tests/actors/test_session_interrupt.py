"""Pause, cancel and a node's deadline reaching a session call (spec: HARV-28..42, ROWS-6).

The harness of `test_session_run` (the simulated host, a scripted owner, one
MockClock) runs with the run's control: a test stops the run as `crw flow pause`
and `crw flow cancel` do, by a request in the run's inbox that the run reads,
once the call it aims at is where the test wants it. Each test asserts the rows
written: kinds, fields and order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import trio
from trio.testing import MockClock

from crw.actors.control import RunControl
from crw.actors.session_run import run_session_calls
from crw.bus import control as requests
from crw.bus import inbox as reports
from crw.bus import steps as bus
from crw.cli.run.answer import append_row
from crw.journal.log import read_journal
from crw.journal.replay import replay
from crw.journal.rows import InterruptRequested, RowModel
from crw.journal.stores import read_run_journal
from tests.actors.spies import TurnsAtCommit
from tests.actors.test_session_lost import insert_before
from tests.actors.test_session_resume import KillPoint, remembering, run_until_killed
from tests.actors.test_session_run import (
    PROTOCOLS,
    RUN_ID,
    Harness,
    Owner,
    harness,
    kinds,
    session_context,
)

Rows = list[dict[str, Any]]
CALL = "build.1"


def rows_of(rows: Rows, call: str = CALL) -> Rows:
    return [row for row in rows if row.get("call") == call]


def last(rows: Rows, kind: str, call: str = CALL) -> dict[str, Any]:
    return [r for r in rows if r["row"] == kind and r.get("call") == call][-1]


async def go(
    h: Harness,
    *,
    stop_when: Callable[[Rows], bool] | None = None,
    op: requests.Op = "pause",
    after_commit: Callable[[Sequence[RowModel]], None] | None = None,
) -> tuple[str, Rows]:
    """Run the harness with the run's control; once `stop_when(rows)` holds, the
    test asks for `op` through the run's inbox, as the command does."""
    control = RunControl(run=h.run)
    protocol = "multi_agent_v2" if h.owner.v2 else "multi_agent_v1"
    async with session_context(
        h.run,
        h.client,
        h.owner.thread_id,
        h.settings,
        after_commit=after_commit,
        control=control,
        multi_agent=protocol,
    ) as (ctx, rows, nursery):
        await nursery.start(control.watch)
        await nursery.start(ctx.inbox.run)
        nursery.start_soon(h.owner.play)
        if stop_when is not None:
            nursery.start_soon(_ask_when, h, stop_when, op)
        state = await run_session_calls(ctx, ctx.workflow.pool, replay(rows), rows)
    return state, read_run_journal(h.run.journal).rows


async def _ask_when(h: Harness, stop_when: Callable[[Rows], bool], op: requests.Op) -> None:
    while True:  # the journal, as the command reads it
        if stop_when(read_run_journal(h.run.journal).rows):
            break
        await trio.sleep(0.05)
    requests.write_request(h.run, requests.Request.new(h.run.id, op, "t"))


def has(kind: str, call: str = CALL, **fields: Any) -> Callable[[Rows], bool]:
    def holds(rows: Rows) -> bool:
        return any(
            r["row"] == kind
            and r.get("call") == call
            and all(r.get(name) == value for name, value in fields.items())
            for r in rows
        )

    return holds


@dataclass
class TurnAtCommit:
    """The host's status of the subagent's newest turn when interrupt_requested
    became durable: the interrupt had not been sent yet if it is inProgress; and
    the (mock) clock's time then."""

    h: Harness
    seen: list[str] = field(default_factory=list)
    at: list[float] = field(default_factory=list)

    def after_commit(self, rows: Sequence[RowModel]) -> None:
        for row in rows:
            if row.row == "interrupt_requested":
                turn = next(
                    t
                    for thread in self.h.sim.state.threads.values()
                    for t in thread.turns
                    if t.id == getattr(row, "turn_id", None)
                )
                self.seen.append(turn.status)
                self.at.append(trio.current_time())


def host_turn(h: Harness, turn_id: str) -> Any:
    return next(t for th in h.sim.state.threads.values() for t in th.turns if t.id == turn_id)


@PROTOCOLS
async def test_pause_interrupts_the_running_turn_and_holds_the_call_once_it_is_over(
    tmp_path: Path, autojump_clock: MockClock, multi_agent: str
) -> None:
    """spec: HARV-28, HARV-31, HARV-35, HARV-36, ROWS-6 (turn/interrupt works on a
    v2 child as on any thread; v2 closes none)"""
    async with harness(tmp_path, multi_agent=multi_agent) as h:
        await h.script({"marker": f"{CALL}/*"}, hang=True)
        at_commit = TurnAtCommit(h)
        state, rows = await go(
            h, stop_when=has("turn_started"), after_commit=at_commit.after_commit
        )
        turn_id = last(rows, "turn_started")["turn_id"]
        status = host_turn(h, turn_id).status
        agent = last(rows, "thread_started")["thread_id"]
        closed = h.sim.state.threads[agent].status == "notLoaded" or any(
            c.agent_id == agent for c in bus.list_closes(h.run)
        )
        pending = requests.read_requests(h.run)
    assert state == "paused"
    assert kinds(rows, CALL) == [
        "prepared",
        "step_published",
        "thread_started",
        "turn_started",
        "interrupt_requested",
        "held",
    ]
    requested = last(rows, "interrupt_requested")
    assert (requested["reason"], requested["op"], requested["attempt"]) == (
        "paused",
        f"{CALL}/t1",
        1,
    )
    assert requested["turn_id"] == turn_id
    assert at_commit.seen == ["inProgress"]  # durable before the interrupt was sent
    assert status == "interrupted"
    assert last(rows, "held")["reason"] == "paused"
    assert rows[-1]["row"] == "paused" and rows[-1]["reason"] == "paused"
    assert "review.1" not in {r.get("call") for r in rows}
    assert closed == (multi_agent == "v1")
    assert pending == []  # the request was answered by the paused row


async def test_a_paused_call_is_held_only_once_its_turn_has_stopped_running(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: HARV-31: the subagent's turn runs on through three reads after the
    interrupt (a host winding down); the run reads the thread until it is no longer
    active, and only then writes the held row, then the paused row."""
    async with harness(tmp_path) as h:
        await h.script({"marker": f"{CALL}/*"}, hang=True, slowStop={"reads": 3})
        watch = TurnsAtCommit(h.sim)
        state, rows = await go(h, stop_when=has("turn_started"), after_commit=watch.after_commit)
    assert state == "paused"
    assert kinds(rows, CALL)[-2:] == ["interrupt_requested", "held"]
    assert watch.of(CALL) == [
        ("interrupt_requested", ("inProgress",)),
        ("held", ("interrupted",)),
    ]
    assert [kind for kind, _, _ in watch.seen[-2:]] == ["held", "paused"]


async def test_cancel_holds_the_call_ends_the_run_cancelled_and_closes_its_subagent(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: HARV-29, HARV-31, ROWS-6: the turn runs on through two reads after the
    interrupt; the call is held once it stopped"""
    async with harness(tmp_path) as h:
        await h.script({"marker": f"{CALL}/*"}, hang=True, slowStop={"reads": 2})
        watch = TurnsAtCommit(h.sim)
        state, rows = await go(
            h, stop_when=has("turn_started"), op="cancel", after_commit=watch.after_commit
        )
        agent = last(rows, "thread_started")["thread_id"]
        closes = [c.agent_id for c in bus.list_closes(h.run)]
        closed = h.sim.state.threads[agent].status == "notLoaded"
    assert state == "ended"
    assert kinds(rows, CALL)[-2:] == ["interrupt_requested", "held"]
    assert watch.of(CALL)[-1] == ("held", ("interrupted",))
    assert last(rows, "interrupt_requested")["reason"] == "cancelled"
    assert last(rows, "held")["reason"] == "cancelled"
    assert [r["row"] for r in rows[-2:]] == ["cancelled", "ended"]
    assert rows[-1]["status"] == "cancelled"
    assert rows[-1]["state"] == {"explore": "completed", "build": "held", "review": "unrun"}
    assert closed or agent in closes


async def test_a_call_waiting_for_its_dispatch_retracts_its_step_and_sends_no_interrupt(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: HARV-32, HARV-34"""
    async with harness(tmp_path) as h:
        h.owner = SkippingOwner(h.client, h.run, h.owner.thread_id, skip=CALL, report_k=())
        state, rows = await go(h, stop_when=has("step_published"))
        steps = [s for s in bus.list_steps(h.run) if s.call == CALL]
    assert state == "paused"
    assert kinds(rows, CALL) == ["prepared", "step_published", "held"]
    assert last(rows, "held")["reason"] == "paused"
    assert steps == []
    assert h.owner.spawned == [last(rows, "thread_started", "explore.1")["thread_id"]]


@dataclass
class SkippingOwner(Owner):
    """The owner, but it never takes the steps of `skip` (k 1), or takes them and
    reports only `report_k`."""

    skip: str = ""
    report_k: tuple[int, ...] = (1,)
    seen: set[tuple[str, int, int]] = field(default_factory=set)

    async def play(self) -> None:
        while True:
            for step in await trio.to_thread.run_sync(bus.list_steps, self.run):
                key = (step.call, step.k, step.attempt)
                if key in self.seen or (step.call == self.skip and not self.report_k):
                    continue
                self.seen.add(key)
                agent = await self._take(step)
                if step.call != self.skip or step.k in self.report_k:
                    written = reports.Report.new(RUN_ID, step.call, step.k, step.attempt, agent, "")
                    reports.write_report(self.run, written)
            await trio.sleep(0.5)


async def test_a_send_input_taken_and_not_bound_has_its_turn_bound_before_the_interrupt(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: HARV-33, HARV-35"""
    async with harness(tmp_path, poll=600) as h:  # no lookup binds the repair
        await h.script({"marker": f"{CALL}/t1-*"}, invalidFirst=True)
        await h.script({"marker": f"{CALL}/t2-*"}, hang=True)
        h.owner = SkippingOwner(h.client, h.run, h.owner.thread_id, skip=CALL, report_k=(1,))
        state, rows = await go(h, stop_when=lambda _: marker_turn(h, f"{CALL}/t2-a1") is not None)
        repair = marker_turn(h, f"{CALL}/t2-a1")
    assert state == "paused"
    assert kinds(rows, CALL)[-4:] == [
        "step_published",
        "turn_started",
        "interrupt_requested",
        "held",
    ]
    bound = last(rows, "turn_started")
    assert repair is not None
    assert (bound["k"], bound["op"], bound["turn_id"]) == (2, f"{CALL}/t2", repair.id)
    assert last(rows, "interrupt_requested")["turn_id"] == repair.id
    assert last(rows, "interrupt_requested")["op"] == f"{CALL}/t2"
    assert repair.status == "interrupted"


def marker_turn(h: Harness, marker: str) -> Any:
    """The turn on one of the owner's subagents that starts with `marker`, if any."""
    for thread in h.sim.state.threads.values():
        if thread.parent_thread_id != h.owner.thread_id:
            continue
        for turn in thread.turns:
            user = next(i for i in turn.items if i["type"] == "userMessage")
            if user["content"][0]["text"].startswith(f"crw-flow-op: {marker}\n"):
                return turn
    return None


async def test_a_nodes_timeout_interrupts_its_call_and_the_run_goes_on(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: HARV-30, HARV-31: the turn runs on through two reads after the
    interrupt; the call is held once it stopped"""
    async with harness(tmp_path) as h:
        wf = h.run.root.parent / "wf.toml"
        wf.write_text(
            wf.read_text().replace('needs = ["explore"]\n', 'needs = ["explore"]\ntimeout = 600\n')
        )
        await h.script({"marker": f"{CALL}/*"}, hang=True, slowStop={"reads": 2})
        watch = TurnsAtCommit(h.sim)
        before = trio.current_time()
        state, rows = await go(h, after_commit=watch.after_commit)
        took = trio.current_time() - before
    assert kinds(rows, CALL) == [
        "prepared",
        "step_published",
        "thread_started",
        "turn_started",
        "interrupt_requested",
        "held",
    ]
    assert watch.of(CALL)[-1] == ("held", ("interrupted",))
    assert last(rows, "interrupt_requested")["reason"] == "deadline"
    assert last(rows, "held")["reason"] == "deadline"
    assert 600 <= took < 700
    assert state == "waiting_decision"
    assert not any(r["row"] in ("paused", "cancelled", "ended") for r in rows)


@PROTOCOLS
async def test_resume_after_a_pause_runs_the_held_call_again_to_completion(
    tmp_path: Path, autojump_clock: MockClock, multi_agent: str
) -> None:
    """spec: CMD-NEXT-2 (a paused run), HARV-39 (the new attempt carries no intent),
    ATT-30, ATT-32 (the paused call goes on in place: a new attempt takes its turn
    again at the next k, in the replaced turn's conversation place)"""
    async with harness(tmp_path, multi_agent=multi_agent) as h:
        await h.script({"marker": f"{CALL}/t1-a1"}, hang=True)
        paused, first = await go(h, stop_when=has("turn_started"))
        assert paused == "paused" and replay(first).paused_reason == "paused"
        state, rows = await go(h)
    assert state == "ended" and rows[-1]["status"] == "completed"
    assert kinds(rows[len(first) :], CALL) == [
        "step_published",
        "thread_started",
        "turn_started",
        "completed",
    ]
    again = last(rows, "step_published")
    assert (again["k"], again["attempt"], again["marker"]) == (2, 2, f"{CALL}/t2-a2")
    assert (again["conversation_turn"], again["replaces_turn"]) == (1, f"{CALL}/t1-a1")
    assert again["note"].startswith(
        "Attempt 1 of this call stopped: the call was held (paused: the run was paused"
    )
    assert "and the run was resumed; this is attempt 2" in again["note"]


async def test_a_resumed_process_holds_the_turn_the_interrupt_was_asked_for_whatever_it_came_to(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: HARV-37, HARV-38, HARV-42"""
    async with harness(tmp_path) as h:
        await h.script({"marker": f"{CALL}/*"}, seconds=300)
        kill = KillPoint("interrupt_requested", CALL)
        with kill.scope:
            await go(h, stop_when=has("turn_started"), after_commit=kill.after_commit)
        assert kill.scope.cancelled_caught
        dead = read_journal(h.run.journal).rows
        turn_id = last(dead, "interrupt_requested")["turn_id"]
        for request in requests.read_requests(h.run):  # the intent alone decides
            requests.remove_request(h.run, request.id)
        await trio.sleep(600)  # the turn the interrupt never reached completes, answered
        completed = host_turn(h, turn_id).status
        state, rows = await go(h)
    assert completed == "completed"
    assert kinds(rows[len(dead) :], CALL) == ["held"]
    assert last(rows, "held")["reason"] == "paused"
    assert kinds(rows, CALL).count("interrupt_requested") == 1
    assert state == "waiting_decision"


async def test_a_run_stopped_as_it_resumes_holds_the_open_call_without_writing_its_step_again(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: HARV-32, HARV-34 (the call an earlier process left waiting for its dispatch)"""
    async with harness(tmp_path) as h:
        h.owner = SkippingOwner(h.client, h.run, h.owner.thread_id, skip=CALL, report_k=())
        kill = KillPoint("step_published", CALL)
        with kill.scope:
            await go(h, after_commit=kill.after_commit)
        dead = read_journal(h.run.journal).rows
        written: list[str] = []
        original = bus.write_packet

        def write_packet(run: Any, step: bus.StepFile, text: str | None, **kwargs: Any) -> None:
            written.append(step.call)
            original(run, step, text, **kwargs)

        monkeypatch.setattr(bus, "write_packet", write_packet)
        requests.write_request(h.run, requests.Request.new(h.run.id, "pause", "t"))
        state, rows = await go(h)
        steps = [s for s in bus.list_steps(h.run) if s.call == CALL]
    assert state == "paused"
    assert [(r["row"], r.get("call")) for r in rows[len(dead) :]] == [
        ("held", CALL),
        ("paused", None),
    ]
    assert written == [] and steps == []


async def test_a_step_the_resumed_process_publishes_again_starts_with_no_intent(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: HARV-40, HARV-42: the dead process's rows end with build.1's step and
    an interrupt intent for that step and attempt naming a turn no row bound (as a
    held call's running turn found unbound is named). Nothing was spawned, so the
    resumed process publishes the step again; the turn the owner's spawn starts
    for it is another turn: the intent is not moved onto it, and the call
    completes with its answer."""
    async with harness(tmp_path) as h:
        remembering(h)
        dead = await run_until_killed(h, monkeypatch, "step_published")
        _, step_file = bus.step_paths(h.run, CALL, 1, 1)
        assert not step_file.exists()  # the process died before it wrote the file
        intent = InterruptRequested(
            call=CALL, reason="paused", op=f"{CALL}/t1", attempt=1, turn_id="turn-unbound"
        )
        append_row(h.run, intent)
        state, rows = await h.go()
    assert kinds(dead, CALL) == ["prepared", "step_published"]
    assert kinds(rows[len(dead) :], CALL) == [
        "interrupt_requested",
        "thread_started",
        "turn_started",
        "completed",
    ]
    bound = last(rows, "turn_started")
    assert (bound["op"], bound["attempt"]) == (f"{CALL}/t1", 1)
    assert bound["turn_id"] != "turn-unbound"
    assert "held" not in kinds(rows, CALL)
    assert state == "ended" and rows[-1]["status"] == "completed"


@pytest.mark.parametrize("named", [True, False], ids=["intent-names-its-turn", "op-and-attempt"])
async def test_a_repair_turn_the_host_started_after_the_interrupt_starts_with_no_intent(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch, named: bool
) -> None:
    """spec: HARV-41, HARV-42: the rows hold an interrupt intent for build.1's task
    turn (its op and attempt; `named`: and the turn's id), then the repair step (a
    send_input) the owner had not taken when the process died. The resumed process
    publishes the repair again; the turn the host starts for it on the same
    subagent, after the interrupt, carries no intent: the repair's answer
    completes the call."""
    async with harness(tmp_path) as h:
        remembering(h)
        await h.script({"marker": f"{CALL}/*"}, invalidFirst=True)
        dead = await run_until_killed(h, monkeypatch, "step_published", nth=2)
        task_turn = last(dead, "turn_started")["turn_id"]
        intent = InterruptRequested(
            call=CALL,
            reason="paused",
            op=f"{CALL}/t1",
            attempt=1,
            turn_id=task_turn if named else None,
        )
        insert_before(h.run.journal, "step_published", intent)
        dead = read_journal(h.run.journal).rows
        state, rows = await h.go()
    assert kinds(dead, CALL)[-2:] == ["interrupt_requested", "step_published"]
    assert last(dead, "step_published")["action"] == "send_input"
    assert kinds(rows[len(dead) :], CALL) == ["turn_started", "completed"]
    repair = last(rows, "turn_started")
    assert (repair["op"], repair["attempt"]) == (f"{CALL}/t2", 1)
    assert repair["turn_id"] != task_turn
    assert last(rows, "completed")["k"] == 2
    assert state == "ended" and rows[-1]["status"] == "completed"
