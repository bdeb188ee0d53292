"""Two session runs of one workflow on one owner thread, on the simulated host, one
MockClock: the owner plays both, interleaved, and reports no spawn, so every bind
is the marker lookup's. Both runs publish the same markers (`explore.1/t1-a1` in
each); a run binds only the subagents its own step messages spawned (they name
its packets). On multi-agent v2 (the tests parametrized `multi_agent`) the owner
spawns by each step's task name, whose digest is its run's: a run binds only the
children of its own names.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import trio
from trio.testing import MockClock

from crw.actors.host_reader import open_host_reader
from crw.actors.inbox import Inbox
from crw.actors.session_run import answer_unrouted, run_session_calls
from crw.bus import inbox as reports
from crw.bus import steps as bus
from crw.engine.owner.host_call_v2 import tool_call_v2
from crw.engine.run.rundir import RunDir
from crw.engine.steps.replies import CallRecords
from crw.engine.steps.task_name import task_name
from crw.host.client import HostClient, open_client
from crw.host.sim.connection import connect_in_memory
from crw.host.sim.server import SimHost, open_sim_host
from crw.journal.log import read_journal
from crw.journal.replay import replay
from crw.settings import Settings
from tests.actors.test_app_server_run import CHAIN
from tests.actors.test_session_run import session_context

RUNS = ("run-a", "run-b")
ENDED_WITHIN = 7 * 24 * 3600.0
"""Mock seconds both runs have to end before the test fails. Far more than they
take: while a worker thread of a run (a journal fsync) is slow on a loaded
machine, the autojumping clock runs on with every timer of the owner and the
runs, hours in a second."""


@dataclass
class TwoRunOwner:
    """The owner thread of both runs: each pass spawns every new step of each run in
    `runs`' order, from the step's message, reports none, and closes what a run
    asks. With `misreport`, run-b's first subagent is reported to run-a as run-a's
    explore.1 step before run-a's step is spawned, and run-a's reply is kept."""

    client: HostClient
    runs: dict[str, RunDir]
    thread_id: str
    misreport: bool = False
    v2: bool = False
    reply: dict[str, Any] | None = None
    spawned: dict[str, list[str]] = field(default_factory=lambda: {run: [] for run in RUNS})
    closed: dict[str, list[str]] = field(default_factory=lambda: {run: [] for run in RUNS})

    async def play(self) -> None:
        # Both runs' first steps are published before the owner takes any: the
        # interleaving is `runs`' order, whichever run published first.
        while not all(bus.list_steps(run) for run in self.runs.values()):  # noqa: ASYNC110
            await trio.sleep(0.5)
        seen: set[tuple[str, str, int, int]] = set()
        while True:
            for run_id, run in self.runs.items():
                # Read in the loop's thread: the owner never waits on a worker
                # thread, so while it sleeps the clock jumps its 0.5 s, not to a
                # far deadline.
                for step in bus.list_steps(run):
                    if (run_id, step.call, step.k, step.attempt) in seen:
                        continue
                    seen.add((run_id, step.call, step.k, step.attempt))
                    await self._take(run_id, step)
                for close in bus.list_closes(run):
                    assert not self.v2, "a run on v2 writes no close step here"
                    await self.client.request("sim/closeAgent", {"target": close.agent_id})
                    self.closed[run_id].append(close.agent_id)
                    bus.remove_close(run, close.call, close.attempt, close.agent_id)
            await trio.sleep(0.5)

    async def _take(self, run_id: str, step: bus.StepFile) -> None:
        if self.v2:
            call = tool_call_v2(step, run_id)
            params = {"parentThreadId": self.thread_id, **call["arguments"]}
            if call["tool"] == "followup_task":
                await self.client.request("sim/v2/followupTask", params)
                return
            path = str((await self.client.request("sim/v2/spawnAgent", params))["task_name"])
            self.spawned[run_id].append(await self._child(path))
            if self.misreport and run_id == "run-b" and self.reply is None:
                self.reply = await self._report("run-a", step, path)
            return
        if step.action == "send_input":
            target = {"target": step.agent_id, "message": step.message}
            await self.client.request("sim/sendInput", target)
            return
        params = {
            "parentThreadId": self.thread_id,
            "agentType": step.agent_type,
            "message": step.message,
        }
        agent = str((await self.client.request("sim/spawnAgent", params))["agentId"])
        self.spawned[run_id].append(agent)
        if self.misreport and run_id == "run-b" and self.reply is None:
            self.reply = await self._report("run-a", step, agent)

    async def _child(self, path: str) -> str:
        read = await self.client.request(
            "thread/read", {"threadId": self.thread_id, "includeTurns": True}
        )
        return next(
            str(item["agentThreadId"])
            for turn in read["thread"]["turns"]
            for item in turn["items"]
            if item["type"] == "subAgentActivity" and item["agentPath"] == path
        )

    async def _report(self, run_id: str, step: bus.StepFile, agent: str) -> dict[str, Any]:
        """Report `agent` to `run_id` as its `step`, once `run_id` published that step
        (the owner read it there), and wait for the run's reply."""
        key = (step.call, step.k, step.attempt)
        while key not in {(s.call, s.k, s.attempt) for s in bus.list_steps(self.runs[run_id])}:  # noqa: ASYNC110
            await trio.sleep(0.5)
        report = reports.Report.new(run_id, step.call, step.k, step.attempt, agent, "t")
        reports.write_report(self.runs[run_id], report)
        while (reply := reports.read_reply(self.runs[run_id], report.id)) is None:  # noqa: ASYNC110
            await trio.sleep(0.5)
        assert reply["reply"] == "refused", reply  # a bind here makes both runs wait for ever
        return reply


async def run_one(
    sim: SimHost, run: RunDir, owner: str, settings: Settings, multi_agent: str = "v1"
) -> str:
    """One run's process: its own host connection, reader, inbox and journal."""
    protocol = f"multi_agent_{multi_agent}"
    async with (
        open_client(await connect_in_memory(sim)) as client,
        session_context(run, client, owner, settings, run_id=run.id, multi_agent=protocol) as (
            ctx,
            rows,
            nursery,
        ),
    ):
        await nursery.start(ctx.inbox.run)
        state = await run_session_calls(ctx, ctx.workflow.pool, replay(rows), rows)
    return state


@asynccontextmanager
async def two_runs(tmp_path: Path) -> AsyncIterator[tuple[SimHost, HostClient, dict[str, RunDir]]]:
    flow = tmp_path / "flow"
    flow.mkdir(parents=True)
    (flow / "wf.toml").write_text(CHAIN)
    runs = {run_id: RunDir(flow / run_id) for run_id in RUNS}
    for run in runs.values():
        run.create()
    async with (
        open_sim_host(tmp_path / "home") as sim,
        open_client(await connect_in_memory(sim)) as client,
    ):
        yield sim, client, runs


def rows_of(run: RunDir, kind: str) -> list[dict[str, Any]]:
    return [row for row in read_journal(run.journal).rows if row["row"] == kind]


async def both_ended(
    owner: TwoRunOwner,
    runs: dict[str, RunDir],
    owner_id: str,
    states: dict[str, str],
    sim: SimHost,
    settings: Settings,
    multi_agent: str = "v1",
) -> None:
    """Run both runs to their end (within ENDED_WITHIN) while the owner plays them."""
    async with trio.open_nursery() as nursery:
        nursery.start_soon(owner.play)

        async def go(run_id: str) -> None:
            states[run_id] = await run_one(sim, runs[run_id], owner_id, settings, multi_agent)

        # Only the runs are under the deadline: while the owner, cancelled, waits
        # for its worker thread, the autojumping clock may jump to any deadline.
        with trio.fail_after(ENDED_WITHIN):
            async with trio.open_nursery() as both:
                for run_id in RUNS:
                    both.start_soon(go, run_id)
        nursery.cancel_scope.cancel()


async def play_both(
    tmp_path: Path,
    order: tuple[str, ...] = RUNS,
    misreport: bool = False,
    multi_agent: str = "v1",
) -> tuple[TwoRunOwner, dict[str, RunDir]]:
    """Both runs to their end, the owner playing both; every run's rows checked:
    every thread_started of each run names a subagent its own step message spawned,
    the two sets are disjoint, its close steps name only its own subagents, and both
    complete."""
    settings = Settings(poll_interval=2.0, host_poll_interval=30.0)
    async with two_runs(tmp_path) as (sim, client, runs):
        v2 = multi_agent == "v2"
        started = await client.request("sim/startOwner", {"multiAgentV2": v2})
        owner_id = str(started["threadId"])
        played = {run_id: runs[run_id] for run_id in order}
        owner = TwoRunOwner(client, played, owner_id, misreport=misreport, v2=v2)
        states: dict[str, str] = {}
        await both_ended(owner, runs, owner_id, states, sim, settings, multi_agent)
    assert states == {run_id: "ended" for run_id in RUNS}
    bound: dict[str, list[str]] = {}
    for run_id, run in runs.items():
        assert read_journal(run.journal).rows[-1]["status"] == "completed"
        bound[run_id] = [row["thread_id"] for row in rows_of(run, "thread_started")]
        assert len(bound[run_id]) == 3  # explore.1, build.1, review.1: one subagent each
        assert sorted(bound[run_id]) == sorted(owner.spawned[run_id])
        completed = [row["call"] for row in rows_of(run, "completed")]
        assert sorted(completed) == ["build.1", "explore.1", "review.1"]
        assert not rows_of(run, "session_host_warning")  # no several_spawns
        # Its close steps (taken, or waiting when the run ended) name its own.
        closes = owner.closed[run_id] + [c.agent_id for c in bus.list_closes(run)]
        assert sorted(closes) == ([] if v2 else sorted(owner.spawned[run_id]))
    assert not set(bound["run-a"]) & set(bound["run-b"])
    return owner, runs


@pytest.mark.parametrize("multi_agent", ["v1", "v2"])
async def test_two_runs_on_one_owner_bind_only_their_own_subagents(
    tmp_path: Path, autojump_clock: MockClock, multi_agent: str
) -> None:
    """spec: DISP-25, DISP-4, BIND-1: the marker lookup of each run binds only the
    subagents its own step messages spawned, whichever run's the owner spawned
    first."""
    await play_both(tmp_path / "a-first", multi_agent=multi_agent)
    await play_both(tmp_path / "b-first", order=("run-b", "run-a"), multi_agent=multi_agent)


@pytest.mark.parametrize("multi_agent", ["v1", "v2"])
async def test_a_report_of_the_other_runs_subagent_is_refused_naming_that_run(
    tmp_path: Path, autojump_clock: MockClock, multi_agent: str
) -> None:
    """spec: DISP-10, DISP-3, DISP-4, DISP-5: the owner reports run-b's subagent to
    run-a (same call, k and attempt): refused, and run-a binds its own later. On v2
    the name's digest tells only that it is another step's or run's."""
    owner, _ = await play_both(
        tmp_path, order=("run-b", "run-a"), misreport=True, multi_agent=multi_agent
    )
    assert owner.reply is not None
    reason = (
        "the subagent carries run run-b's step"
        if multi_agent == "v1"
        else f"the subagent /root/{task_name('run-b', 'explore.1/t1-a1')} carries another "
        "step or run's task name"
    )
    assert (owner.reply["reply"], owner.reply["reason"]) == ("refused", reason)


@pytest.mark.parametrize("multi_agent", ["v1", "v2"])
async def test_a_late_report_of_the_other_runs_subagent_is_refused_and_closes_nothing(
    tmp_path: Path, autojump_clock: MockClock, multi_agent: str
) -> None:
    """spec: DISP-10, DISP-13: once run-a's explore.1 ended, the owner reports
    run-b's explore.1 subagent to run-a for that step. The inbox answers it (no call
    waits on it) after reading the subagent on the host: refused naming run-b, not
    close, and run-a writes no row and no close step for it."""
    settings = Settings(poll_interval=2.0, host_poll_interval=30.0)
    async with two_runs(tmp_path) as (sim, client, runs):
        v2 = multi_agent == "v2"
        started = await client.request("sim/startOwner", {"multiAgentV2": v2})
        owner_id = str(started["threadId"])
        owner = TwoRunOwner(client, dict(runs), owner_id, v2=v2)
        states: dict[str, str] = {}
        await both_ended(owner, runs, owner_id, states, sim, settings, multi_agent)
        run_a = runs["run-a"]
        rows = read_journal(run_a.journal).rows
        theirs = owner.spawned["run-b"][0]  # run-b's explore.1 subagent
        report = reports.Report.new("run-a", "explore.1", 1, 1, theirs, "t")
        reports.write_report(run_a, report)
        async with (
            open_client(await connect_in_memory(sim)) as reading,
            open_host_reader(reading, settings) as reader,
        ):
            records = CallRecords(rows)
            inbox = Inbox(
                run_a, run_a.id, settings, lambda r: answer_unrouted(records, reader.read, r)
            )
            await inbox.poll()
        reply = reports.read_reply(run_a, report.id)
    assert reply is not None
    reason = (
        "the subagent carries run run-b's step"
        if multi_agent == "v1"
        else f"the subagent /root/{task_name('run-b', 'explore.1/t1-a1')} carries another "
        "run's task name"
    )
    assert (reply["reply"], reply["reason"]) == ("refused", reason)
    assert read_journal(run_a.journal).rows == rows
    assert theirs not in [close.agent_id for close in bus.list_closes(run_a)]


async def test_a_spawn_after_the_bind_is_closed_and_the_other_runs_subagent_is_not(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: ROWS-14 (session_host_warning several_spawns), DISP-25, DISP-4: once
    run-a bound its explore.1 subagent, the owner spawns run-a's explore.1 step
    again and reports nothing. When the bound turn ends run-a closes that
    duplicate and writes several_spawns once; run-b's explore.1 subagent (same
    marker) is closed by neither run's strays, and run-b writes no warning."""
    settings = Settings(poll_interval=2.0, host_poll_interval=30.0)
    async with two_runs(tmp_path) as (sim, client, runs):
        await client.request(
            "sim/script", {"match": {"marker": "explore.1/*"}, "behaviour": {"seconds": 30}}
        )
        owner_id = str((await client.request("sim/startOwner", {}))["threadId"])
        owner = TwoRunOwner(client, dict(runs), owner_id)
        take, again = owner._take, []

        async def spawn_again_after_the_bind(step: bus.StepFile) -> None:
            while any(s.call == "explore.1" for s in bus.list_steps(runs["run-a"])):  # noqa: ASYNC110
                await trio.sleep(0.5)
            params = {"parentThreadId": owner_id, "agentType": step.agent_type}
            answer = await client.request("sim/spawnAgent", params | {"message": step.message})
            again.append(str(answer["agentId"]))

        states: dict[str, str] = {}
        async with trio.open_nursery() as nursery:

            async def take_then_again(run_id: str, step: bus.StepFile) -> None:
                if (run_id, step.call, step.k) == ("run-a", "explore.1", 1):
                    nursery.start_soon(spawn_again_after_the_bind, step)
                await take(run_id, step)

            owner._take = take_then_again  # type: ignore[method-assign]
            await both_ended(owner, runs, owner_id, states, sim, settings)
        threads = sim.state.threads
    assert states == {run_id: "ended" for run_id in RUNS}
    [duplicate] = again
    warnings = [(r["op"], r["warnings"]) for r in rows_of(runs["run-a"], "session_host_warning")]
    assert warnings == [("explore.1/t1", ["several_spawns"])]
    assert not rows_of(runs["run-b"], "session_host_warning")
    assert duplicate in owner.closed["run-a"] and threads[duplicate].status == "notLoaded"
    for run_id, run in runs.items():
        closes = owner.closed[run_id] + [c.agent_id for c in bus.list_closes(run)]
        own = owner.spawned[run_id] + (again if run_id == "run-a" else [])
        assert sorted(closes) == sorted(own)  # its own, each once
        started = [row["thread_id"] for row in rows_of(run, "thread_started")]
        assert sorted(started) == sorted(owner.spawned[run_id])
        assert read_journal(run.journal).rows[-1]["status"] == "completed"
