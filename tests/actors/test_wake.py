"""Waking the owner while steps wait: the run process on the simulated host.

The whole run process (`run_process`) runs under one MockClock with a scripted
owner (`tests.actors.test_session_run.Owner`) that takes the run's steps only
from a given time on, so the run's wakes, renotifications and escalation are
seen in its rows, its outbox and the owner thread's turns.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import trio
from trio.testing import MockClock

from crw.actors.host_reader import HostReader
from crw.actors.run import run_process
from crw.clock import fixed_clock
from crw.engine.owner import wake as plan
from crw.engine.owner.wake import batch_of
from crw.engine.run.rundir import RunDir
from crw.engine.run.runspec import RunSpec
from crw.host.client import HostClient, open_client
from crw.host.sim.connection import connect_in_memory
from crw.host.sim.server import SimHost, open_sim_host
from crw.host.sim.state import turn_text
from crw.journal.log import read_journal
from crw.settings import Settings
from tests.actors.test_run_faults import linked_run
from tests.actors.test_session_run import RUN_ID, Owner

Rows = list[dict[str, Any]]
SETTINGS = Settings(poll_interval=10.0, host_poll_interval=30.0, inbox_poll=2.0)
"""Polls hours of mock time cost little at these intervals."""
ONE = """
name = "one"
pool = 1

[[node]]
id = "explore"
role = "explorer"
task = "Find the files."
schema.type = "object"
schema.required = ["files"]
schema.properties.files = { type = "array", items = { type = "string" } }
"""
OP = "explore.1/t1"
BATCH = batch_of([OP])
WAKE = f"run:{RUN_ID}/{BATCH}"
FLOW = ("session_wake", "message_delivery", "escalation")
WITHIN = 24 * 3600.0
"""Mock seconds a wait for a row has before the test fails: each test's run ends
in under 3 h of mock time. A wait polls, so the clock reaches this bound in steps
of its poll; a bare fail_after around the run process would not do: while the
process waits on a worker thread with no timer of its own, the autojump clock
jumps straight to the bound."""


@dataclass
class WakeRun:
    dir: RunDir
    spec: RunSpec
    state: Path
    sim: SimHost
    client: HostClient
    owner: Owner

    async def process(self) -> str:
        return await run_process(
            self.dir, self.spec, self.state, clock=fixed_clock(), settings=SETTINGS
        )

    def rows(self) -> Rows:
        return read_journal(self.dir.journal).rows

    def owner_texts(self) -> list[str]:
        """The first user message of each of the owner thread's turns."""
        return [turn_text(t) for t in self.sim.state.threads[self.owner.thread_id].turns]

    async def play_after(self, wake_id: str) -> None:
        """Take the run's steps once the wake `wake_id` was delivered."""
        await written(self, wake_id)
        await self.owner.play()

    async def script(self, match: dict[str, str], **behaviour: Any) -> None:
        await self.client.request("sim/script", {"match": match, "behaviour": behaviour})


@asynccontextmanager
async def wake_run(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    *,
    plays_now: bool = False,
    plays_after: str | None = None,
) -> AsyncIterator[WakeRun]:
    """A session run of ONE whose owner takes its steps at once (`plays_now`), or
    once the wake `plays_after` is delivered, or when the test says."""
    async with (
        open_sim_host(tmp_path / "home") as sim,
        open_client(await connect_in_memory(sim)) as client,
    ):
        owner_id = str((await client.request("sim/startOwner", {}))["threadId"])
        _, run_dir, spec = linked_run(tmp_path, monkeypatch, sim, ONE, owner=owner_id)
        state = tmp_path / "state"
        run = WakeRun(run_dir, spec, state, sim, client, Owner(client, run_dir, owner_id))

        async with trio.open_nursery() as nursery:
            if plays_now:
                nursery.start_soon(run.owner.play)
            if plays_after is not None:
                nursery.start_soon(run.play_after, plays_after)
            yield run
            nursery.cancel_scope.cancel()


async def until(what: str, done: Callable[[], bool], every: float = 10.0) -> None:
    """Return once `done()` holds (polling, as a reader does); fail naming `what`
    when it does not within WITHIN mock seconds."""
    try:
        with trio.fail_after(WITHIN):
            while not done():  # noqa: ASYNC110
                await trio.sleep(every)
    except trio.TooSlowError:
        raise AssertionError(f"{what}: not so after {WITHIN:.0f} mock seconds") from None


def has(run: WakeRun, kind: str, wake_id: str) -> bool:
    return any(r["row"] == kind and r.get("wake_id") == wake_id for r in run.rows())


async def written(run: WakeRun, wake_id: str) -> None:
    """Return once the delivery of `wake_id` is durable."""
    await until(f"{wake_id} delivered", lambda: has(run, "message_delivery", wake_id))


async def owner_idle(run: WakeRun) -> None:
    """Return once the owner's turns all ended (the wake's turns run a mock second):
    a process starting then finds it idle, so its publication wakes it."""
    threads = run.sim.state.threads
    idle = lambda: threads[run.owner.thread_id].active_turn() is None  # noqa: E731
    await until("the owner idle", idle, every=1.0)


def flow(rows: Rows) -> Rows:
    return [row for row in rows if row["row"] in FLOW]


def wakes(rows: Rows) -> Rows:
    return [row for row in rows if row["row"] == "session_wake"]


def at(rows: Rows, kind: str) -> list[int]:
    return [i for i, row in enumerate(rows) if row["row"] == kind]


async def test_an_unanswered_step_renotifies_doubling_to_an_hour_and_escalates_once(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An idle owner gets a session_step_waiting turn when the step is published;
    unanswered, it is notified again at 15 min, then 30 min, 1 h, 1 h later, each
    a session_wake row staged in outbox/ and delivered as a turn (message_delivery
    after it), and at 2 h the session_unresponsive escalation once; the run goes
    on waiting and ends when the owner takes the step.
    spec: WAKE-1, WAKE-2, WAKE-5, WAKE-8, WAKE-9, WAKE-10, WAKE-11, WAKE-12, WAKE-13,
    ROWS-12, ROWS-17"""
    async with wake_run(tmp_path, monkeypatch, plays_after=f"{WAKE}/r4") as run:
        assert await run.process() == "ended"
        texts = run.owner_texts()
    rows = run.rows()
    assert rows[-1]["status"] == "completed"
    ids = [WAKE, *(f"{WAKE}/r{m}" for m in (1, 2, 3, 4))]
    waited = [0.0, 900.0, 2700.0, 6300.0, 9900.0]
    owner = run.owner.thread_id
    expected: Rows = []
    for renotify, wid in enumerate(ids):
        if renotify == 4:
            escalation = {"reason": "session_unresponsive", "owner": owner, "ops": [OP]}
            expected.append({"row": "escalation", **escalation, "batch": BATCH})
        expected.append(
            {
                "row": "session_wake",
                "batch": BATCH,
                "wake_id": wid,
                "renotify": renotify,
                "ops": [OP],
                "owner": owner,
                "owner_status": "idle",
                "staged": True,
            }
        )
        expected.append({"row": "message_delivery", "wake_id": wid, "status": "delivered"})
    got = flow(rows)
    keys = ["row", "batch", "wake_id", "renotify", "ops", "owner", "owner_status", "staged"]
    keys += ["reason", "status"]
    assert [{k: r[k] for k in keys if k in r} for r in got] == expected
    assert [r["waiting_seconds"] for r in wakes(rows)] == pytest.approx(waited)
    assert [r["waiting_seconds"] for r in got if r["row"] == "escalation"] == [
        pytest.approx(7200.0)
    ]
    assert {r["via"] for r in got if r["row"] == "message_delivery"} == {"turn"}
    # Intent before effect: the step's row before its wake, the wake's row before
    # its delivery; the owner's bind after every wake (it takes the step at 3 h).
    assert at(rows, "step_published")[0] < at(rows, "session_wake")[0]
    assert at(rows, "session_wake")[-1] < at(rows, "message_delivery")[-1]
    assert at(rows, "message_delivery")[-1] < at(rows, "turn_started")[0]
    wake_texts = [t for t in texts if t.startswith("crw-flow-wake:")]
    assert [t.splitlines()[0] for t in wake_texts] == [f"crw-flow-wake: {wid}" for wid in ids]
    assert all(f"session_step_waiting: run {RUN_ID} has 1 step" in t for t in wake_texts)
    assert sorted(p.name for p in run.dir.outbox.iterdir()) == sorted(
        f"{BATCH}{suffix}.json" for suffix in ("", ".r1", ".r2", ".r3", ".r4")
    )


async def test_a_dispatched_report_stops_renotifying(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The owner takes the step after the first renotification; its subagent then
    works for hours: no step waits, so no wake and no escalation follows.
    spec: WAKE-9, WAKE-12"""
    async with wake_run(tmp_path, monkeypatch, plays_after=f"{WAKE}/r1") as run:
        await run.script({"marker": f"{OP}-a1"}, seconds=6600)  # past the 2 h
        assert await run.process() == "ended"
    rows = run.rows()
    assert rows[-1]["status"] == "completed"
    assert [(r["row"], r.get("renotify")) for r in flow(rows)] == [
        ("session_wake", 0),
        ("message_delivery", None),
        ("session_wake", 1),
        ("message_delivery", None),
    ]
    assert at(rows, "session_wake")[-1] < at(rows, "turn_started")[0]


async def test_a_not_loaded_owner_is_resumed_then_gets_its_turn(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: WAKE-1, WAKE-3"""
    async with wake_run(tmp_path, monkeypatch, plays_after=WAKE) as run:
        await run.client.request("sim/restart", {})  # the owner is notLoaded now
        assert await run.process() == "ended"
        texts = run.owner_texts()
        resumes = run.sim.served.get("thread/resume", 0)
    rows = run.rows()
    first = wakes(rows)[0]
    assert (first["owner_status"], first["staged"], first["wake_id"]) == ("notLoaded", True, WAKE)
    delivery = next(r for r in rows if r["row"] == "message_delivery")
    assert (delivery["wake_id"], delivery["status"], delivery["via"]) == (
        WAKE,
        "delivered",
        "resume_turn",
    )
    assert resumes >= 1
    assert [t for t in texts if t.startswith("crw-flow-wake:")] == [
        plan.wake_text(WAKE, RUN_ID, [OP])
    ]


async def test_a_busy_owner_gets_its_wake_after_its_running_turn(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The owner's turn runs until the renotification at 15 min was staged: the
    publication stages no wake (only an idle or notLoaded owner gets one), the
    renotification is staged whatever its status and delivered once its turn ends.
    spec: WAKE-1, WAKE-4, WAKE-11"""
    async with wake_run(tmp_path, monkeypatch, plays_after=f"{WAKE}/r1") as run:
        await run.script({"marker": "owner/*"}, seconds=WITHIN)
        owner = run.owner.thread_id
        busy = {"threadId": owner, "input": [{"type": "text", "text": "crw-flow-op: owner/t1-a1"}]}
        turn_id = (await run.client.request("turn/start", busy))["turn"]["id"]

        async def end_turn_once_staged() -> None:
            # Its end is the test's act, not a mock duration: the run's worker
            # threads let the autojump clock run past any duration the test picks.
            await until(f"{WAKE}/r1 staged", lambda: has(run, "session_wake", f"{WAKE}/r1"))
            await run.client.request("turn/interrupt", {"threadId": owner, "turnId": turn_id})

        async with trio.open_nursery() as nursery:
            nursery.start_soon(end_turn_once_staged)
            assert await run.process() == "ended"
        turns = run.sim.state.threads[owner].turns
    rows = run.rows()
    assert [(r["renotify"], r["owner_status"], r["staged"]) for r in wakes(rows)] == [
        (1, "active", True)
    ]
    delivery = next(r for r in rows if r["row"] == "message_delivery")
    assert (delivery["wake_id"], delivery["via"]) == (f"{WAKE}/r1", "after_turn")
    wake_turn = next(t for t in turns if turn_text(t).startswith("crw-flow-wake:"))
    assert delivery["turn_id"] == wake_turn.id
    assert turns[0].completed_at is not None and wake_turn.started_at >= turns[0].completed_at


async def test_a_wake_the_outbox_holds_already_stages_nothing(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first attempt's subagent vanishes; the next attempt republishes the same
    step (op), whose wake the outbox holds: staged false with the reason, and no
    second delivery. spec: WAKE-5, WAKE-7, ROWS-13"""
    async with wake_run(tmp_path, monkeypatch, plays_now=True) as run:
        await run.script({"marker": f"{OP}-a1"}, vanish="notLoaded")
        assert await run.process() == "ended"
    rows = run.rows()
    assert [r["attempt"] for r in rows if r["row"] == "step_published"] == [1, 2]
    got = [(r["wake_id"], r["staged"], r.get("reason")) for r in wakes(rows)]
    assert got == [(WAKE, True, None), (WAKE, False, "already_held")]
    assert at(rows, "session_attempt_lost")[0] < at(rows, "session_wake")[1]
    assert [r["wake_id"] for r in rows if r["row"] == "message_delivery"] == [WAKE]
    assert [p.name for p in run.dir.outbox.iterdir()] == [f"{BATCH}.json"]


async def test_a_resumed_process_wakes_under_its_own_ids(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first process dies after its first renotification; the second (the run's
    2nd started row) wakes the owner about the same waiting step under
    `<batch>/e2`, counting its renotifications from 0 again; every wake id is
    delivered once. spec: WAKE-6, WAKE-14"""
    async with wake_run(tmp_path, monkeypatch) as run:
        async with trio.open_nursery() as nursery:

            async def die_after_first_renotify() -> None:
                await written(run, f"{WAKE}/r1")
                nursery.cancel_scope.cancel()  # the process dies (its rows stay)

            nursery.start_soon(die_after_first_renotify)
            await run.process()
        await owner_idle(run)
        first = len(run.rows())
        async with trio.open_nursery() as nursery:
            nursery.start_soon(run.play_after, f"{WAKE}/e2")
            assert await run.process() == "ended"
            nursery.cancel_scope.cancel()
    rows = run.rows()
    assert [r["wake_id"] for r in wakes(rows[:first])] == [WAKE, f"{WAKE}/r1"]
    resumed = wakes(rows[first:])
    assert [(r["wake_id"], r["renotify"]) for r in resumed] == [(f"{WAKE}/e2", 0)]
    delivered = [r["wake_id"] for r in rows if r["row"] == "message_delivery"]
    assert delivered == [WAKE, f"{WAKE}/r1", f"{WAKE}/e2"]


async def test_a_wake_that_cannot_be_staged_records_the_error(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: ROWS-13"""

    def full(src: Any, dst: Any, **_: Any) -> None:
        raise OSError(28, "No space left on device", str(dst))

    async with wake_run(tmp_path, monkeypatch, plays_now=True) as run:
        monkeypatch.setattr(os, "link", full)
        assert await run.process() == "ended"
    rows = run.rows()
    wake = wakes(rows)[0]
    assert (wake["staged"], wake["wake_id"]) == (False, WAKE)
    assert wake["error"] == f"{run.dir.outbox / (BATCH + '.json')}: No space left on device"
    assert "reason" not in wake
    assert "message_delivery" not in {r["row"] for r in rows}


async def test_a_wake_delivered_by_a_process_that_died_is_recorded_once_and_not_sent_again(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first process dies right after the owner's wake turn started, before
    its message_delivery row: the next process finds the turn on the owner thread
    and records its delivery (via found), then wakes under its own id; the owner
    got each message once. spec: WAKE-6, WAKE-8"""
    real = HostReader.start_turn

    async def sent_then_dies(self: HostReader, thread_id: str, text: str, **params: Any) -> Any:
        await real(self, thread_id, text, **params)
        await trio.sleep_forever()

    monkeypatch.setattr(HostReader, "start_turn", sent_then_dies)
    async with wake_run(tmp_path, monkeypatch) as run:
        async with trio.open_nursery() as nursery:

            async def die_once_sent() -> None:
                sent = lambda: any(t.startswith("crw-flow-wake:") for t in run.owner_texts())  # noqa: E731
                await until("a wake sent", sent, every=1.0)
                nursery.cancel_scope.cancel()

            nursery.start_soon(die_once_sent)
            await run.process()
        assert "message_delivery" not in {r["row"] for r in run.rows()}
        await owner_idle(run)
        monkeypatch.setattr(HostReader, "start_turn", real)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(run.play_after, f"{WAKE}/e2")
            assert await run.process() == "ended"
            nursery.cancel_scope.cancel()
        owner = run.sim.state.threads[run.owner.thread_id]
        first = next(
            t.id for t in owner.turns if turn_text(t).startswith(f"crw-flow-wake: {WAKE}\n")
        )
        texts = run.owner_texts()
    rows = run.rows()
    deliveries = [
        (r["wake_id"], r["via"], r["turn_id"]) for r in rows if r["row"] == "message_delivery"
    ]
    assert deliveries[0] == (WAKE, "found", first)
    assert [(w, via) for w, via, _ in deliveries] == [(WAKE, "found"), (f"{WAKE}/e2", "turn")]
    heads = [t.splitlines()[0] for t in texts if t.startswith("crw-flow-wake:")]
    assert heads == [f"crw-flow-wake: {WAKE}", f"crw-flow-wake: {WAKE}/e2"]
    assert at(rows, "message_delivery")[0] < at(rows, "session_wake")[-1]
