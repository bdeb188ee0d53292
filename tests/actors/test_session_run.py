"""Session calls end to end on the simulated host, with a scripted owner, one MockClock.

The owner here plays what Codex's owner thread does: it reads the step files,
spawns or sends input through `sim/spawnAgent` / `sim/sendInput`, reports with a
dispatch report (or not, to exercise the marker lookup), and closes subagents on
their close steps. On multi-agent v2 (the tests parametrized `multi_agent`) it
takes each step's v2 host call instead (`sim/v2/spawnAgent` with the step's task
name, `sim/v2/followupTask`) and reports the child's path, and the run binds by
task name: the same rows. Each test asserts the rows written.
"""

from __future__ import annotations

import errno
import json
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import trio
from trio.testing import MockClock

from crw.actors.host_reader import HostReader, open_host_reader
from crw.actors.inbox import Inbox
from crw.actors.journal_writer import open_journal_writer
from crw.actors.session_context import SessionContext
from crw.actors.session_run import answer_unrouted, run_session_calls
from crw.actors.step_binder_v2 import owner_child
from crw.bus import inbox as reports
from crw.bus import steps as bus
from crw.clock import fixed_clock
from crw.engine.config.roles import RolePair, RoleTable
from crw.engine.config.workflow import load_workflow
from crw.engine.owner.host_call_v2 import tool_call_v2
from crw.engine.owner.multi_agent import V2
from crw.engine.run.rundir import RunDir
from crw.engine.steps.replies import CallRecords
from crw.host.client import HostClient, open_client
from crw.host.protocol import ThreadStatus
from crw.host.sim.connection import connect_in_memory
from crw.host.sim.server import SimHost, open_sim_host
from crw.journal.log import read_journal
from crw.journal.replay import replay
from crw.journal.rows import RowModel
from crw.journal.stores import read_run_journal
from crw.settings import Settings
from tests.actors.test_app_server_run import CHAIN

RUN_ID = "run-1"
PROTOCOLS = pytest.mark.parametrize("multi_agent", ["v1", "v2"])
"""The multi-agent protocols a test runs on: the same rows on either."""
GO_DEADLINE_S = 3_600
"""The most a `go` runs on the mock clock: an hour (each passing one takes minutes)."""


@dataclass
class Owner:
    """The owner thread's side: spawn, send input, report, close."""

    client: HostClient
    run: RunDir
    thread_id: str
    report: bool = True
    v2: bool = False
    """The owner has multi-agent v2's tools, and takes each step's v2 host call."""
    spawned: list[str] = field(default_factory=list)
    replies: list[dict[str, Any]] = field(default_factory=list)

    async def play(self) -> None:
        seen: set[tuple[str, int, int]] = set()
        while True:
            for step in await trio.to_thread.run_sync(bus.list_steps, self.run):
                if (step.call, step.k, step.attempt) in seen:
                    continue
                seen.add((step.call, step.k, step.attempt))
                agent = await self._take(step)
                if self.report:
                    report = reports.Report.new(RUN_ID, step.call, step.k, step.attempt, agent, "t")
                    reports.write_report(self.run, report)
            for close in bus.list_closes(self.run):
                if self.v2:
                    params = {"parentThreadId": self.thread_id, "target": close.agent_id}
                    await self.client.request("sim/v2/interruptAgent", params)
                else:
                    await self.client.request("sim/closeAgent", {"target": close.agent_id})
                bus.remove_close(self.run, close.call, close.attempt, close.agent_id)
            await trio.sleep(0.5)

    async def _take(self, step: bus.StepFile) -> str:
        if self.v2:
            return await self._take_v2(step)
        if step.action == "send_input":
            assert step.agent_id is not None
            await self.client.request(
                "sim/sendInput", {"target": step.agent_id, "message": step.message}
            )
            return step.agent_id
        params = {
            "parentThreadId": self.thread_id,
            "agentType": step.agent_type,
            "message": step.message,
        }
        if step.model:
            params["model"] = step.model
        if step.reasoning_effort:
            params["reasoningEffort"] = step.reasoning_effort
        agent = str((await self.client.request("sim/spawnAgent", params))["agentId"])
        self.spawned.append(agent)
        return agent

    async def _take_v2(self, step: bus.StepFile) -> str:
        """The step's v2 host call, as `crw flow next` spells it; the agent the
        dispatch report names (the child's path for a spawn)."""
        call = tool_call_v2(step, self.run.id)
        params = {"parentThreadId": self.thread_id, **call["arguments"]}
        if call["tool"] == "followup_task":
            await self.client.request("sim/v2/followupTask", params)
            return str(step.agent_id)
        path = str((await self.client.request("sim/v2/spawnAgent", params))["task_name"])
        self.spawned.append(await self.child(path))
        return path

    async def child(self, path: str) -> str:
        """The thread id of the owner's child at `path`, from the owner's thread."""
        read = await self.client.request(
            "thread/read", {"threadId": self.thread_id, "includeTurns": True}
        )
        return next(
            str(item["agentThreadId"])
            for turn in read["thread"]["turns"]
            for item in turn["items"]
            if item["type"] == "subAgentActivity" and item["agentPath"] == path
        )


@dataclass
class Harness:
    sim: SimHost
    client: HostClient
    run: RunDir
    owner: Owner
    settings: Settings
    watched: list[int] = field(default_factory=list)
    """The threads the reader held when each `go` ended its calls."""
    reads: list[int] = field(default_factory=list)
    """The thread/reads each `go`'s reader sent."""

    async def script(self, match: dict[str, str], **behaviour: Any) -> None:
        await self.client.request("sim/script", {"match": match, "behaviour": behaviour})

    async def go(
        self, pairs: dict[str, RolePair] | None = None
    ) -> tuple[str, list[dict[str, Any]]]:
        protocol = "multi_agent_v2" if self.owner.v2 else "multi_agent_v1"
        async with session_context(
            self.run,
            self.client,
            self.owner.thread_id,
            self.settings,
            pairs=pairs,
            multi_agent=protocol,
        ) as (ctx, rows, nursery):
            await nursery.start(ctx.inbox.run)
            nursery.start_soon(self.owner.play)
            with trio.fail_after(GO_DEADLINE_S):  # a bind that never comes fails, not hangs
                state = await run_session_calls(ctx, ctx.workflow.pool, replay(rows), rows)
            self.watched.append(ctx.reader.watched)
            self.reads.append(ctx.reader.reads)
        return state, read_run_journal(self.run.journal).rows


@asynccontextmanager
async def session_context(
    run: RunDir,
    client: HostClient,
    owner: str,
    settings: Settings,
    *,
    run_id: str = RUN_ID,
    pairs: dict[str, RolePair] | None = None,
    after_commit: Callable[[Sequence[RowModel]], None] | None = None,
    **members: Any,
) -> AsyncIterator[tuple[SessionContext, list[dict[str, Any]], trio.Nursery]]:
    """The context of `run`'s session calls as its process makes it (its reader,
    journal writer and inbox, `members` the optional others: control, placer), the
    journal's rows so far, and a nursery cancelled once the block ends, in which
    the caller starts the inbox and what else runs beside the calls."""
    workflow = load_workflow(run.root.parent / "wf.toml")
    rows = read_run_journal(run.journal).rows
    records = CallRecords(rows)
    # Named only when given: tests patch this module's open_journal_writer with
    # their own after_commit.
    told: dict[str, Any] = {} if after_commit is None else {"after_commit": after_commit}
    async with (
        open_host_reader(client, settings) as reader,
        open_journal_writer(run.journal, clock=fixed_clock(), **told) as journal,
        trio.open_nursery() as nursery,
    ):

        async def child_at(path: str) -> tuple[str | None, str | None]:
            return await owner_child(reader, owner, path)

        v2 = child_at if members.get("multi_agent") == V2 else None  # as the run's process
        inbox = Inbox(run, run_id, settings, lambda r: answer_unrouted(records, reader.read, r, v2))
        ctx = SessionContext(
            journal=journal,
            reader=reader,
            inbox=inbox,
            workflow=workflow,
            run=run,
            run_id=run_id,
            owner=owner,
            tmpdir="/run/tmp",
            pairs=RoleTable.undecided().roles | (pairs or {}),
            settings=settings,
            clock=fixed_clock(),
            records=records,
            **members,
        )
        yield ctx, rows, nursery
        nursery.cancel_scope.cancel()


@asynccontextmanager
async def harness(
    tmp_path: Path,
    *,
    report: bool = True,
    poll: float = 2.0,
    multi_agent: str = "v1",
    host_poll: float = 30.0,
) -> AsyncIterator[Harness]:
    (tmp_path / "wf.toml").write_text(CHAIN)
    run = RunDir(tmp_path / "run")
    run.create()
    async with (
        open_sim_host(tmp_path / "home") as sim,
        open_client(await connect_in_memory(sim)) as client,
    ):
        v2 = multi_agent == "v2"
        started = await client.request("sim/startOwner", {"multiAgentV2": v2})
        owner = Owner(client, run, str(started["threadId"]), report=report, v2=v2)
        yield Harness(
            sim, client, run, owner, Settings(poll_interval=poll, host_poll_interval=host_poll)
        )


def kinds(rows: list[dict[str, Any]], call: str) -> list[str]:
    return [row["row"] for row in rows if row.get("call") == call]


def bind_batches(run: RunDir) -> dict[str, int]:
    """How many batches (the journal lines' `commit_seq` framing) each call's
    thread_started and turn_started rows of its first turn were committed in."""
    batches: dict[str, set[int]] = {}
    for line in run.journal.read_text().splitlines():
        row = json.loads(line)
        if row["row"] in ("thread_started", "turn_started") and row.get("k", 1) == 1:
            batches.setdefault(row["call"], set()).add(row["commit_seq"])
    return {call: len(seqs) for call, seqs in batches.items()}


@PROTOCOLS
async def test_session_run_takes_every_call_to_completed(
    tmp_path: Path, autojump_clock: MockClock, multi_agent: str
) -> None:
    """spec: GEN-1, GEN-2, GEN-3, STEP-8, STEP-23, BIND-6, HARV-1, HARV-56"""
    async with harness(tmp_path, multi_agent=multi_agent) as h:
        state, rows = await h.go()
        closes = bus.list_closes(h.run)
    assert state == "ended" and rows[-1]["status"] == "completed"
    for call in ("explore.1", "build.1", "review.1"):
        assert kinds(rows, call) == [
            "prepared",
            "step_published",
            "thread_started",
            "turn_started",
            "completed",
        ]
    assert bind_batches(h.run) == {call: 1 for call in ("explore.1", "build.1", "review.1")}
    # Each subagent got its close step once its call ended (the owner closed it,
    # or its file waits for the owner when the run ends); on v2 none: an idle
    # child holds no slot, and v2 has no close_agent.
    closed = {
        agent for agent in h.owner.spawned if h.sim.state.threads[agent].status == "notLoaded"
    }
    if multi_agent == "v1":
        assert closed | {c.agent_id for c in closes} == set(h.owner.spawned)
    else:
        assert not closed and not closes
    assert len(h.owner.spawned) == 3
    # What the reader read of each subagent (every item of its turns) went with
    # its close: a run's memory grows with its calls in flight, not its calls run.
    assert h.watched == [0]


async def test_a_long_turn_is_read_as_often_as_a_short_one(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: ATT-1, ATT-2 (the marker turn followed to its end, an active thread
    waited for). A tool-using subagent sends a token count after every model
    response, and a read of its thread answers every item so far: the follower
    reads on a change of the turn or the thread's status, not on a count."""
    reads: dict[int, list[int]] = {}
    for responses in (1, 40):
        (tmp_path / str(responses)).mkdir()
        async with harness(tmp_path / str(responses)) as h:
            await h.script({"marker": "explore.1/*"}, seconds=20, responses=responses)
            state, rows = await h.go()
        assert state == "ended" and rows[-1]["status"] == "completed"
        assert kinds(rows, "explore.1")[-1] == "completed"
        reads[responses] = h.reads
    assert reads[40] == reads[1]


async def test_step_published_records_the_step_before_its_files(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: STEP-9, STEP-10, STEP-11, STEP-17, STEP-22, STEP-37"""
    async with harness(tmp_path) as h:
        _, rows = await h.go()
    step = next(r for r in rows if r["row"] == "step_published" and r["call"] == "explore.1")
    assert (step["k"], step["op"], step["marker"], step["attempt"]) == (
        1,
        "explore.1/t1",
        "explore.1/t1-a1",
        1,
    )
    assert step["action"] == "spawn" and step["conversation_turn"] == 1
    assert step["input"].startswith("crw-flow-op: explore.1/t1-a1\nCRW-ROLE: explorer\n\n")
    assert step["input_digest"].startswith("sha256:") and step["packet_digest"].startswith(
        "sha256:"
    )
    assert step["role"] == "explorer" and step["agent_type"] == "explorer"
    assert step["workspace"].endswith("calls/explore.1")
    assert step["packet"] == str(h.run.steps / "explore.1" / "packet-t1-a1.md")
    assert (await trio.Path(step["packet"]).read_text()).rstrip().endswith("```")


@PROTOCOLS
async def test_bind_records_the_subagent_and_its_turn(
    tmp_path: Path, autojump_clock: MockClock, multi_agent: str
) -> None:
    """spec: BIND-1, BIND-2, BIND-5, STEP-7, DISP-6, DISP-17"""
    async with harness(
        tmp_path, poll=600, multi_agent=multi_agent
    ) as h:  # the reports bind, not the lookup
        _, rows = await h.go()
        replies = [reports.read_reply(h.run, p.stem) for p in h.run.replies.glob("*.json")]
    started = next(r for r in rows if r["row"] == "thread_started" and r["call"] == "explore.1")
    assert started["via"] == "session" and started["parent_thread_id"] == h.owner.thread_id
    assert started["cwd"].endswith("calls/explore.1") and started["cwd"] != started.get("host_cwd")
    assert started["marker"] == "explore.1/t1-a1" and started["attempt"] == 1
    assert started["pair_unchecked"] is True and started["rollout_path"]
    turn = next(r for r in rows if r["row"] == "turn_started" and r["call"] == "explore.1")
    assert (turn["k"], turn["op"], turn["marker"], turn["conversation_turn"]) == (
        1,
        "explore.1/t1",
        "explore.1/t1-a1",
        1,
    )
    assert sorted(r["reply"] for r in replies if r) == ["bound"] * 3


@PROTOCOLS
async def test_unreported_spawn_is_bound_by_its_marker(
    tmp_path: Path, autojump_clock: MockClock, multi_agent: str
) -> None:
    """spec: DISP-25"""
    async with harness(tmp_path, report=False, multi_agent=multi_agent) as h:
        state, rows = await h.go()
    assert state == "ended" and rows[-1]["status"] == "completed"
    assert [r["thread_id"] for r in rows if r["row"] == "thread_started"] == h.owner.spawned


@PROTOCOLS
async def test_repair_goes_to_the_open_subagent_as_send_input(
    tmp_path: Path, autojump_clock: MockClock, multi_agent: str
) -> None:
    """spec: STEP-27, STEP-14, STEP-16, BIND-7, HARV-9, HARV-16, HARV-17"""
    async with harness(tmp_path, multi_agent=multi_agent) as h:
        await h.script(
            {"marker": "build.1/*"},
            invalidFirst=True,
            tokens={"input": 100, "cachedInput": 0, "output": 10, "reasoningOutput": 0},
        )
        _, rows = await h.go()
    assert kinds(rows, "build.1") == [
        "prepared",
        "step_published",
        "thread_started",
        "turn_started",
        "step_published",
        "turn_started",
        "completed",
    ]
    repair = [r for r in rows if r["row"] == "step_published" and r["call"] == "build.1"][1]
    assert (
        repair["action"] == "send_input" and repair["k"] == 2 and repair["conversation_turn"] == 2
    )
    assert repair["agent_id"] == next(
        r["thread_id"] for r in rows if r["row"] == "thread_started" and r["call"] == "build.1"
    )
    assert repair["input"].startswith("crw-flow-op: build.1/t2-a1\n")
    assert repair["previous_answer"] and repair["tokens_seen"]["input"] == 100
    done = next(r for r in rows if r["row"] == "completed" and r["call"] == "build.1")
    assert done["tokens"]["input"] == 200 and done["tokens"]["output"] == 20


@PROTOCOLS
async def test_unreported_repair_is_bound_by_its_marker_turn(
    tmp_path: Path, autojump_clock: MockClock, multi_agent: str
) -> None:
    """spec: DISP-26"""
    async with harness(tmp_path, report=False, multi_agent=multi_agent) as h:
        await h.script({"marker": "build.1/*"}, invalidFirst=True)
        state, rows = await h.go()
    assert state == "ended"
    assert kinds(rows, "build.1").count("turn_started") == 2


async def test_pair_mismatch_keeps_the_step_and_names_the_pair(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: DISP-5, DISP-7, DISP-8"""
    async with harness(tmp_path) as h:
        owner, take = h.owner, h.owner._take
        answers: list[dict[str, Any]] = []

        async def wrong_pair_first(step: bus.StepFile) -> str:
            if step.call != "explore.1" or answers:
                return await take(step)
            params = {
                "parentThreadId": owner.thread_id,
                "agentType": "explorer",
                "message": step.message,
                "model": "other",
                "reasoningEffort": "low",
            }
            wrong = str((await h.client.request("sim/spawnAgent", params))["agentId"])
            report = reports.Report.new(RUN_ID, step.call, step.k, step.attempt, wrong, "t")
            reports.write_report(h.run, report)
            while (reply := reports.read_reply(h.run, report.id)) is None:  # noqa: ASYNC110
                await trio.sleep(0.1)  # the owner polls its reply as `dispatched` does
            answers.append(reply)
            await h.client.request("sim/closeAgent", {"target": wrong})
            return await take(step)  # spawn again with the role's pair, as the reply says

        owner._take = wrong_pair_first  # type: ignore[method-assign]
        pairs = {"explorer": RolePair(agent_type="explorer", model="gpt-5.5", effort="high")}
        state, rows = await h.go(pairs)
    assert answers[0]["reply"] == "pair_mismatch"
    assert answers[0]["pair"] == {
        "agent_type": "explorer",
        "model": "gpt-5.5",
        "reasoning_effort": "high",
    }
    started = [r for r in rows if r["row"] == "thread_started" and r["call"] == "explore.1"]
    assert len(started) == 1 and started[0]["model"] == "gpt-5.5"
    assert kinds(rows, "explore.1").count("step_published") == 1  # the step stayed
    assert state == "ended"


async def test_report_for_a_step_never_published_is_answered(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: DISP-11, DISP-15"""
    async with harness(tmp_path) as h:
        early = reports.Report.new(RUN_ID, "zzz.1", 1, 1, "agent-x", "t")
        empty = reports.Report.new(RUN_ID, "zzz.1", 1, 1, None, "t")
        reports.write_report(h.run, early)
        reports.write_report(h.run, empty)
        await h.go()
        assert (reports.read_reply(h.run, early.id) or {})["reply"] == "close"
        assert (reports.read_reply(h.run, empty.id) or {})["reply"] == "refused"


async def test_failed_session_turn_outcomes_are_the_engines(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: HARV-15"""
    async with harness(tmp_path) as h:
        await h.script({"marker": "explore.1/*"}, fail="contextWindowExceeded")
        state, rows = await h.go()
    end = next(r for r in rows if r["row"] == "null_model")
    assert end["call"] == "explore.1" and end["reason"] == "context_window_exceeded"
    assert state == "ended" and rows[-1]["status"] == "failed"


async def test_a_failed_session_turn_read_interrupted_before_its_end_is_the_engines(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """codex sends the failing turn's `error {willRetry: false}` before its end, and
    meanwhile a read shows the turn interrupted with no error on a systemError
    thread: that error is the turn's, and the attempt is not lost.
    spec: HARV-11, HARV-15"""
    async with harness(tmp_path) as h:
        # longer than host_poll_interval (30 s) and poll_interval (2 s): read so, twice
        await h.script({"marker": "explore.1/*"}, fail="contextWindowExceeded", lateEnd=120)
        state, rows = await h.go()
    assert "session_attempt_lost" not in kinds(rows, "explore.1")
    end = next(r for r in rows if r["row"] == "null_model")
    assert end["call"] == "explore.1" and end["reason"] == "context_window_exceeded"
    assert state == "ended" and rows[-1]["status"] == "failed"


@pytest.mark.parametrize("moment", ["lateStart", "lateEnd"])
async def test_a_subagent_turn_read_interrupted_for_a_moment_is_not_taken_for_its_end(
    tmp_path: Path, autojump_clock: MockClock, moment: str
) -> None:
    """codex shows a turn as interrupted, no error, on an idle thread for a moment
    after it started it (until it sets it running) and before its `turn/completed`:
    under a 10 ms host poll the attempt is still followed to its answer, neither
    lost nor held. spec: HARV-1, ATT-2"""
    async with harness(tmp_path, host_poll=0.01) as h:
        await h.script({"marker": "explore.1/*"}, **{moment: 0.3})
        state, rows = await h.go()
    assert kinds(rows, "explore.1")[-1] == "completed", kinds(rows, "explore.1")
    assert "session_attempt_lost" not in kinds(rows, "explore.1")
    assert state == "ended" and rows[-1]["status"] == "completed"


async def test_step_that_cannot_be_written_warns_at_1_and_10_then_closes(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: STEP-30, STEP-31, STEP-32, STEP-33, STEP-34, STEP-35, ROWS-18"""
    failures = {"left": 12}
    write_packet = bus.write_packet

    def full_disk(run: RunDir, step: bus.StepFile, text: str, *, durable: bool = False) -> None:
        if step.call == "explore.1" and failures["left"]:
            failures["left"] -= 1
            raise OSError(errno.ENOSPC, "No space left on device")
        write_packet(run, step, text, durable=durable)

    monkeypatch.setattr(bus, "write_packet", full_disk)
    async with harness(tmp_path) as h:
        state, rows = await h.go()
    unwritten = [r for r in rows if r["row"] == "step_unwritten"]
    assert [(r["failures"], r.get("written")) for r in unwritten] == [
        (1, None),
        (10, None),
        (12, True),
    ]
    first = unwritten[0]
    assert (first["marker"], first["k"], first["attempt"], first["action"]) == (
        "explore.1/t1-a1",
        1,
        1,
        "spawn",
    )
    assert first["input_state"] == "not_delivered" and "No space left" in first["error"]
    assert unwritten[2]["first_at"] and unwritten[2]["last_at"]
    assert kinds(rows, "explore.1")[-1] == "completed" and state == "ended"


async def test_unreadable_rollout_leaves_the_turn_unmeasured(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: HARV-26"""
    from crw.engine.answers import outcome

    monkeypatch.setattr(outcome, "read_rollout_total", lambda path: None)
    async with harness(tmp_path) as h:
        _, rows = await h.go()
    unmeasured = [r for r in rows if r["row"] == "tokens_unmeasured"]
    assert [r["call"] for r in unmeasured] == ["explore.1", "build.1", "review.1"]
    assert all(r["pauses"] is False for r in unmeasured)
    assert next(r for r in rows if r["row"] == "completed").get("tokens", {}) == {}


@PROTOCOLS
async def test_report_for_another_run_is_refused(
    tmp_path: Path, autojump_clock: MockClock, multi_agent: str
) -> None:
    """spec: DISP-10"""
    async with harness(tmp_path, multi_agent=multi_agent) as h:
        stray = reports.Report.new("some-other-run", "explore.1", 1, 1, "agent-x", "t")
        reports.write_report(h.run, stray)
        await h.go()
        answer = reports.read_reply(h.run, stray.id) or {}
    assert answer["reply"] == "refused" and "another run" in answer["reason"]


async def test_repair_of_a_closed_subagent_is_a_spawn_step(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: STEP-26, HARV-9"""
    async with harness(tmp_path) as h:
        close_after_first_turn(monkeypatch, h, "build.1")
        await h.script({"marker": "build.1/*"}, invalidFirst=True)
        state, rows = await h.go()
    assert kinds(rows, "build.1") == [
        "prepared",
        "step_published",
        "thread_started",
        "turn_started",
        "step_published",
        "thread_started",
        "turn_started",
        "completed",
    ]
    repair = [r for r in rows if r["row"] == "step_published" and r["call"] == "build.1"][1]
    assert repair["action"] == "spawn" and repair["k"] == 2 and repair["conversation_turn"] == 2
    assert repair["previous_answer"] and repair["repair_errors"]
    assert repair["input"].startswith("crw-flow-op: build.1/t2-a1\nCRW-ROLE: executor\n\n")
    packet_text = await trio.Path(repair["packet"]).read_text()
    assert repair["repair_errors"][0] in packet_text
    started = [r for r in rows if r["row"] == "thread_started" and r["call"] == "build.1"]
    assert started[0]["thread_id"] != started[1]["thread_id"]
    assert state == "ended" and rows[-1]["status"] == "completed"


async def test_step_whose_directory_refuses_writes_is_written_once_it_can_be(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: STEP-30, STEP-32, STEP-33, STEP-35"""
    async with harness(tmp_path) as h:
        blocker = h.run.steps / "explore.1"
        h.run.steps.mkdir(parents=True, exist_ok=True)
        blocker.write_text("not a directory")  # the call's step directory cannot be made

        async def clear_after_some_failures() -> None:
            # The test watches the journal as a reader would: polling, not an event.
            while not any(  # noqa: ASYNC110
                r["row"] == "step_unwritten" for r in read_journal(h.run.journal).rows
            ):
                await trio.sleep(1)
            await trio.sleep(5)  # a few more polls fail
            blocker.unlink()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(clear_after_some_failures)
            state, rows = await h.go()
    unwritten = [r for r in rows if r["row"] == "step_unwritten"]
    assert unwritten[0]["failures"] == 1 and unwritten[0]["input_state"] == "not_delivered"
    assert unwritten[-1]["written"] is True and unwritten[-1]["failures"] > 1
    assert state == "ended" and rows[-1]["status"] == "completed"


def close_after_first_turn(monkeypatch: pytest.MonkeyPatch, h: Harness, call: str) -> None:
    """The owner closes `call`'s first subagent once its turn ended: the host then
    shows it notLoaded, so the repair is a spawn on a new subagent."""
    read = HostReader.read
    closed: set[str] = set()

    async def closed_after_its_turn(self: HostReader, thread_id: str) -> Any:
        thread = await read(self, thread_id)
        if thread_id in closed and thread.turns and thread.turns[-1].status != "inProgress":
            return thread.model_copy(update={"status": ThreadStatus(type="notLoaded")})
        return thread

    monkeypatch.setattr(HostReader, "read", closed_after_its_turn)
    take = h.owner._take

    async def take_and_mark(step: bus.StepFile) -> str:
        agent = await take(step)
        if step.call == call and step.k == 1:
            closed.add(agent)
        return agent

    h.owner._take = take_and_mark  # type: ignore[method-assign]
