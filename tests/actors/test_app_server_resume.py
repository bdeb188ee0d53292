"""App Server calls journal their turn input and go on in place after a crash.

One simulated host lives through the whole test (a shared app-server outlives
the run process); each run process is its own connection, host reader and
journal writer over the one journal. A process is killed right after a chosen
row is durable: the journal's after_commit raises in the committing task (in the
writer's, for a row committed behind), so the process does nothing after that
row, as `CRW_CRASH_AFTER` kills a real one. The
MockClock drives the host's turns and the run alike.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import trio
from trio.testing import MockClock

from crw.actors.app_server_context import CallContext
from crw.actors.app_server_run import run_app_server_calls
from crw.actors.host_reader import open_host_reader
from crw.actors.journal_writer import open_journal_writer
from crw.actors.thread_watches import FOLLOWED_APP_SERVER
from crw.clock import fixed_clock
from crw.engine.config.roles import RolePair, RoleTable
from crw.engine.config.workflow import Workflow, load_workflow
from crw.engine.steps import packet, step_input
from crw.host.client import open_client
from crw.host.sim.connection import connect_in_memory
from crw.host.sim.server import SimHost, open_sim_host
from crw.host.sim.state import Thread
from crw.journal.log import read_journal
from crw.journal.rows import Prepared, RowModel
from crw.settings import Settings
from tests.actors.test_app_server_run import CHAIN, kinds, replayed, terminal

SERIAL = CHAIN.replace("pool = 2", "pool = 1")
TMPDIR = "/run/tmp"
KEY = "shell_environment_policy.set.TMPDIR"
BUILD_TOKENS = {"input": 1000, "cachedInput": 100, "output": 50, "reasoningOutput": 5}


class Killed(Exception):
    """The run process died right after a row was durable."""


def kill_after(kind: str, nth: int = 1, call: str = "build.1") -> Any:
    """An after_commit that kills the process after the nth commit holding `kind`."""
    seen = 0

    def after_commit(rows: Sequence[RowModel]) -> None:
        nonlocal seen
        if any(row.row == kind and row.call == call for row in rows):
            seen += 1
            if seen == nth:
                raise Killed(kind)

    return after_commit


@dataclass
class Host:
    sim: SimHost
    workflow: Workflow
    run_dir: Path
    pairs: Mapping[str, RolePair] | None = None
    """The role pairs its processes run on (undecided when None)."""

    @property
    def journal(self) -> Path:
        return self.run_dir / "journal.jsonl"

    def rows(self) -> list[dict[str, Any]]:
        return read_journal(self.journal).rows

    async def request(self, method: str, params: dict[str, Any]) -> Any:
        async with open_client(await connect_in_memory(self.sim)) as client:
            return await client.request(method, params)

    async def process(self, kill: Any = None) -> str | None:
        """One run process over the journal; its state as it leaves, None if killed."""
        rows = self.rows()
        state: str | None = None
        try:  # a row committed behind is seen durable by the writer's task: it raises there
            async with (
                open_client(
                    await connect_in_memory(self.sim), follows=FOLLOWED_APP_SERVER
                ) as client,
                open_host_reader(
                    client, Settings(host_poll_interval=30.0), follows=FOLLOWED_APP_SERVER
                ) as reader,
                open_journal_writer(
                    self.journal, clock=fixed_clock(), after_commit=kill
                ) as journal,
            ):
                ctx = CallContext(
                    journal=journal,
                    reader=reader,
                    workflow=self.workflow,
                    run_dir=self.run_dir,
                    tmpdir=TMPDIR,
                    pairs=self.pairs or RoleTable.undecided().roles,
                )
                state = await run_app_server_calls(ctx, 1, replayed(rows), rows)
        except* Killed:
            state = None
        return state

    def thread(self, call: str) -> Thread:
        started = [r for r in self.rows() if r["row"] == "thread_started" and r["call"] == call]
        return self.sim.state.threads[started[-1]["thread_id"]]

    def turns_by_marker(self) -> Counter[str]:
        """Every turn the host ran, counted by its marker line."""
        counts: Counter[str] = Counter()
        for thread in self.sim.state.threads.values():
            for turn in thread.wire(include_turns=True)["turns"]:
                counts[turn_text(turn).split("\n", 1)[0]] += 1
        return counts


def turn_text(turn: dict[str, Any]) -> str:
    return str(turn["items"][0]["content"][0]["text"])


@asynccontextmanager
async def host(tmp_path: Path, name: str = "run") -> AsyncIterator[Host]:
    (tmp_path / "wf.toml").write_text(SERIAL)
    async with open_sim_host(tmp_path / f"{name}-home") as sim:
        made = Host(sim, load_workflow(tmp_path / "wf.toml"), tmp_path / name)
        made.run_dir.mkdir()
        await made.request("sim/script", {"match": {"marker": "*"}, "behaviour": {"seconds": 5}})
        behaviour = {"seconds": 60, "invalidFirst": True, "tokens": BUILD_TOKENS}
        await made.request("sim/script", {"match": {"marker": "build.1/*"}, "behaviour": behaviour})
        yield made


def results(rows: list[dict[str, Any]]) -> dict[str, Any]:
    return {r["call"]: (r["result"], r.get("tokens")) for r in rows if r["row"] == "completed"}


async def undisturbed(tmp_path: Path) -> dict[str, Any]:
    async with host(tmp_path, "ref") as ref:  # the run dir as long as "run"
        assert await ref.process() == "ended"
        return results(ref.rows())


async def test_app_server_call_journals_its_turn_input_without_the_tools(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: STEP-56, STEP-57, STEP-58"""
    async with host(tmp_path) as h:
        assert await h.process() == "ended"
        rows = h.rows()
        assert kinds(rows, "explore.1") == [
            "prepared",
            "step_published",
            "thread_started",
            "turn_started",
            "completed",
        ]
        prepared, step = (r for r in rows if r.get("call") == "explore.1" and r["seq"] <= 2)
        assert prepared["seq"] + 1 == step["seq"]  # one batch: the intent before the thread
        assert {k: step[k] for k in ("k", "op", "marker", "attempt", "action")} == {
            "k": 1,
            "op": "explore.1/t1",
            "marker": "explore.1/t1-a1",
            "attempt": 1,
            "action": "spawn",
        }
        assert step["conversation_turn"] == 1 and "workspace" not in step  # prepared's
        assert step["input"].startswith("crw-flow-op: explore.1/t1-a1\nCRW-ROLE: explorer\n")
        assert "## Repository tools" not in step["input"] and TMPDIR not in step["input"]
        assert step["input_digest"].startswith("sha256:")
        thread = h.thread("explore.1")
        [sent] = thread.wire(include_turns=True)["turns"]
        tools = packet.tools_section(
            TMPDIR, None, str(h.run_dir / "run.json"), str(h.workflow.path)
        )
        assert tools is not None
        assert turn_text(sent) == step["input"] + "\n" + tools + "\n"
        assert thread.config[KEY] == TMPDIR


async def test_repair_turn_is_journaled_and_its_text_names_the_tools(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: STEP-57, STEP-61 (the repair turn on the same thread)"""
    async with host(tmp_path) as h:
        assert await h.process() == "ended"
        rows = h.rows()
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
        assert (repair["k"], repair["marker"], repair["action"]) == (
            2,
            "build.1/t2-a1",
            "send_input",
        )
        assert repair["repair"] is True and repair["conversation_turn"] == 2
        assert repair["repair_errors"] and repair["previous_answer"] is not None
        assert "## Repository tools" not in repair["input"]
        _, second = h.thread("build.1").wire(include_turns=True)["turns"]
        # The row keeps the answer once: its input goes whole again with it.
        whole = step_input.full(
            repair["input"], repair["previous_answer"], repair["input_answer_at"]
        )
        assert turn_text(second).startswith(whole)
        assert turn_text(second).rstrip().endswith(f"`TMPDIR={TMPDIR}`")


KILL_POINTS = [
    pytest.param("prepared", 1, 0, id="prepared+step_published"),
    pytest.param("thread_started", 1, 0, id="thread_started"),
    pytest.param("turn_started", 1, 0, id="turn_started-running"),
    pytest.param("turn_started", 1, 120, id="turn_started-completed-unwatched"),
    pytest.param("step_published", 2, 0, id="step_published#2"),
    pytest.param("turn_started", 2, 0, id="turn_started#2-running"),
    pytest.param("turn_started", 2, 120, id="turn_started#2-completed-unwatched"),
    pytest.param("completed", 1, 0, id="completed"),
]


@pytest.mark.parametrize(("kind", "nth", "dead_for"), KILL_POINTS)
async def test_call_left_open_goes_on_in_place_to_the_undisturbed_outcome(
    tmp_path: Path, autojump_clock: MockClock, kind: str, nth: int, dead_for: float
) -> None:
    """spec: STEP-57, STEP-59, STEP-60 (a call an earlier process left open is
    followed on its resumed thread: a turn that completed unwatched is harvested,
    a running one waited for, one never started started once; no turn twice)"""
    reference = await undisturbed(tmp_path)
    async with host(tmp_path) as h:
        assert await h.process(kill_after(kind, nth)) is None
        dead = kinds(h.rows(), "build.1")
        assert dead.count(kind) == nth and dead[-1] == (
            "step_published" if kind == "prepared" else kind  # one batch, two rows
        )
        await trio.sleep(dead_for)
        resumes = h.sim.served.get("thread/resume", 0)
        assert await h.process() == "ended"
        rows = h.rows()
        # The call's thread is resumed (a thread was bound, the call left open).
        bound_and_open = kind not in ("prepared", "completed")
        assert h.sim.served.get("thread/resume", 0) - resumes == bound_and_open
        turns = h.turns_by_marker()
        journal = h.journal.read_text()
    assert rows[-1]["row"] == "ended" and rows[-1]["status"] == "completed"
    assert TMPDIR not in journal  # the entries are the run's, kept in no row
    assert results(rows) == reference
    assert kinds(rows, "build.1") == [
        "prepared",
        "step_published",
        "thread_started",
        "turn_started",
        "step_published",
        "turn_started",
        "completed",
    ]
    assert kinds(rows, "review.1") == kinds(rows, "explore.1")
    assert set(turns.values()) == {1}, turns
    assert turns["crw-flow-op: build.1/t1-a1"] == turns["crw-flow-op: build.1/t2-a1"] == 1


async def test_turn_the_dead_process_started_is_adopted_not_sent_again(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: STEP-61 (the step's marker is looked up on the resumed thread first:
    turn/start reached the host, its turn_started row never was written)"""
    async with host(tmp_path) as h:
        assert await h.process(kill_after("thread_started")) is None
        step = next(r for r in h.rows() if r["row"] == "step_published" and r["call"] == "build.1")
        tools = packet.tools_section(
            TMPDIR, None, str(h.run_dir / "run.json"), str(h.workflow.path)
        )
        text = step["input"] + "\n" + str(tools) + "\n"
        thread_id = h.thread("build.1").id
        params = {"threadId": thread_id, "input": [{"type": "text", "text": text}]}
        started = await h.request("turn/start", params)
        assert await h.process() == "ended"
        rows = h.rows()
        turns = h.turns_by_marker()
    first = next(r for r in rows if r["row"] == "turn_started" and r["call"] == "build.1")
    assert first["turn_id"] == started["turn"]["id"] and first["marker"] == "build.1/t1-a1"
    assert set(turns.values()) == {1}, turns
    assert terminal(rows, "build.1")["row"] == "completed"


@pytest.mark.parametrize(
    ("kind", "dead_for"),
    [
        pytest.param("thread_started", 0, id="turn-never-started"),
        pytest.param("turn_started", 120, id="turn-completed-before-the-restart"),
    ],
)
async def test_thread_resumed_after_a_host_restart_gets_the_leaf_keys_again(
    tmp_path: Path, autojump_clock: MockClock, kind: str, dead_for: float
) -> None:
    """spec: STEP-59, STEP-60, STEP-61"""
    reference = await undisturbed(tmp_path)
    async with host(tmp_path) as h:
        assert await h.process(kill_after(kind)) is None
        await trio.sleep(dead_for)
        await h.request("sim/restart", {})
        thread = h.thread("build.1")
        assert thread.status == "notLoaded" and KEY not in thread.config
        assert await h.process() == "ended"
        rows = h.rows()
        assert thread.config == {KEY: TMPDIR}
        turns = thread.wire(include_turns=True)["turns"]
    assert results(rows) == reference
    assert [turn_text(t).split("\n", 1)[0] for t in turns] == [
        "crw-flow-op: build.1/t1-a1",
        "crw-flow-op: build.1/t2-a1",
    ]
    assert all(turn_text(t).rstrip().endswith(f"`TMPDIR={TMPDIR}`") for t in turns)


async def test_turn_the_host_cut_off_in_its_restart_is_held_never_sent_again(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """A turn that was running when the host restarted ends interrupted with no
    answer: the call is held host_failure, as any interrupted turn, and the turn
    is not sent a second time (only a decision runs it again)."""
    async with host(tmp_path) as h:
        assert await h.process(kill_after("turn_started")) is None
        await h.request("sim/restart", {})
        assert await h.process() == "waiting_decision"
        rows = h.rows()
        turns = h.turns_by_marker()
    assert kinds(rows, "build.1")[-2:] == ["turn_started", "held"]
    end = terminal(rows, "build.1")
    assert (end["reason"], end["error"]) == ("host_failure", "the turn was interrupted")
    assert turns["crw-flow-op: build.1/t1-a1"] == 1


async def test_call_an_older_journal_left_at_prepared_publishes_its_first_step(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """A journal written before the App Server steps were journaled leaves a call
    at `prepared` (the process died before its thread): the resumed call publishes
    its first step and runs it, once."""
    async with host(tmp_path) as h:
        prepared = {"row": "prepared", "call": "explore.1", "node": "explore", "role": "explorer"}
        async with open_journal_writer(h.journal, clock=fixed_clock()) as journal:
            await journal.commit([Prepared.model_validate(prepared)])
        assert await h.process() == "ended"
        rows = h.rows()
        turns = h.turns_by_marker()
    assert kinds(rows, "explore.1") == [
        "prepared",
        "step_published",
        "thread_started",
        "turn_started",
        "completed",
    ]
    assert turns["crw-flow-op: explore.1/t1-a1"] == 1
