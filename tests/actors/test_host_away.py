"""A host that goes silent mid-run: the connection stays up, nothing answers.

Unlike a host whose connection closes (tests/actors/test_run_faults.py), nothing
tells the run the host is gone: it must find out by itself within a bounded time,
and say so in its rows, not show the call running for good. The whole run process
runs on the simulated host under one MockClock; the test freezes the host's end
of the run process's connection (messages to it are dropped, none come back).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import trio
from trio.testing import MockClock

from crw.actors.run import run_process
from crw.clock import fixed_clock
from crw.engine.run.rundir import RunDir
from crw.engine.run.runspec import RunSpec
from crw.host.client import open_client
from crw.host.sim.connection import connect_in_memory
from crw.host.sim.server import SimHost, open_sim_host
from crw.journal.log import read_journal
from crw.settings import Settings
from tests.actors.test_app_server_run import CHAIN
from tests.actors.test_run_faults import Links, linked_run
from tests.actors.test_session_run import kinds

SETTINGS = Settings(host_poll_interval=5.0, host_timeout=60.0)
BOUND = SETTINGS.host_poll_interval + SETTINGS.host_timeout
"""The longest a run may take to see a silent host: one fallback poll, whose
thread/read then goes unanswered for host_timeout."""


def freeze(links: Links) -> None:
    """The host goes silent: what it sends is dropped, and it reads no more."""

    async def drop(message: dict[str, Any]) -> None:
        await trio.lowlevel.checkpoint()

    async def drop_encoded(texts: Sequence[str]) -> None:
        await trio.lowlevel.checkpoint()

    async def never() -> dict[str, Any]:
        await trio.sleep_forever()

    for end in links.ends:
        end.send = drop  # type: ignore[method-assign]
        end.send_encoded = drop_encoded  # type: ignore[method-assign]
        end.receive = never  # type: ignore[method-assign]


async def test_app_server_run_whose_host_goes_silent_mid_turn_pauses_within_the_bound(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The explorer's turn runs 600 s; the host goes silent 10 s in. Within one
    poll and host_timeout the run is paused host_unavailable, its error naming the
    request the host did not answer, and the call keeps its rows (no held: the host
    failed no turn); a resume, the host answering again, goes on with the same
    turn and every call completes, no turn run twice."""
    async with open_sim_host(tmp_path / "home") as sim:
        links, run = app_server_run(tmp_path, monkeypatch, sim)
        await sim_script(sim, {"match": {}, "behaviour": {"seconds": 600}})
        frozen_at: list[float] = []
        paused_at: list[float] = []
        async with trio.open_nursery() as nursery:

            async def freeze_mid_turn() -> None:
                await written(run.dir, "turn_started", "explore.1")
                await trio.sleep(10)
                freeze(links)
                frozen_at.append(trio.current_time())
                await written(run.dir, "paused")
                paused_at.append(trio.current_time())

            nursery.start_soon(freeze_mid_turn)
            outcome = await run.process()
            if outcome != "paused":  # the watch of a run that never pauses
                nursery.cancel_scope.cancel()
        assert outcome == "paused", read_journal(run.dir.journal).rows[-1]
        paused = read_journal(run.dir.journal).rows
        assert await run.process() == "ended"
        assert_each_call_completed_once(run.dir, sim)
    assert paused_at[0] - frozen_at[0] <= BOUND + 1
    thread = next(r for r in paused if r["row"] == "thread_started")["thread_id"]
    assert (paused[-1]["row"], paused[-1]["reason"]) == ("paused", "host_unavailable")
    assert paused[-1]["error"] == f"the host did not answer thread/read {thread} within 60 s"
    assert kinds(paused, "explore.1")[-1] == "turn_started"
    assert "held" not in {r["row"] for r in paused}


async def test_app_server_run_whose_connection_closes_mid_turns_pauses_and_resumes_in_place(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two calls' turns run (60 s each) when the host's connection closes: the run
    is paused host_unavailable, no call is held host_failure (a lost connection
    is no turn the host failed), and a resume once the host is back completes
    every call, no turn run twice. spec: HARV-14"""
    async with open_sim_host(tmp_path / "home") as sim:
        links, run = app_server_run(tmp_path, monkeypatch, sim, FAN)
        await sim_script(sim, {"match": {}, "behaviour": {"seconds": 60}})
        async with trio.open_nursery() as nursery:

            async def cut_mid_turns() -> None:
                await written(run.dir, "turn_started", "a.1")
                await written(run.dir, "turn_started", "b.1")
                await trio.sleep(10)
                await links.cut()

            nursery.start_soon(cut_mid_turns)
            outcome = await run.process()
        paused = read_journal(run.dir.journal).rows
        assert await run.process() == "ended"
        assert_each_call_completed_once(run.dir, sim)
    assert outcome == "paused"
    assert (paused[-1]["row"], paused[-1]["reason"]) == ("paused", "host_unavailable")
    assert paused[-1]["error"] == "the simulated host closed the connection"
    assert kinds(paused, "a.1")[-1] == kinds(paused, "b.1")[-1] == "turn_started"
    assert "held" not in {r["row"] for r in paused}
    resumed = read_journal(run.dir.journal).rows[len(paused) :]
    assert [kinds(resumed, call)[-1] for call in ("a.1", "b.1", "c.1")] == ["completed"] * 3


FAN = """
name = "fan"
pool = 2

[[node]]
id = "a"
role = "explorer"
task = "Find the files."
schema = { type = "object" }

[[node]]
id = "b"
role = "explorer"
task = "Find the tests."
schema = { type = "object" }

[[node]]
id = "c"
role = "reviewer"
needs = ["a", "b"]
task = "Review."
schema = { type = "object" }
"""


@dataclass
class AppRun:
    dir: RunDir
    spec: RunSpec
    state: Path

    async def process(self) -> str:
        return await run_process(
            self.dir, self.spec, self.state, clock=fixed_clock(), settings=SETTINGS
        )


def app_server_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sim: SimHost, text: str = CHAIN
) -> tuple[Links, AppRun]:
    """An app-server run of `text` whose process connects through the links."""
    links, run_dir, spec = linked_run(tmp_path, monkeypatch, sim, text, "app-server")
    return links, AppRun(run_dir, spec, tmp_path / "state")


async def written(run_dir: RunDir, kind: str, call: str | None = None) -> None:
    """Return once a `kind` row (of `call`) is durable, polling as a reader does."""
    while not any(  # noqa: ASYNC110
        r["row"] == kind and (call is None or r.get("call") == call)
        for r in read_journal(run_dir.journal).rows
    ):
        await trio.sleep(1)


def assert_each_call_completed_once(run_dir: RunDir, sim: SimHost) -> None:
    """The run ended completed, each call completed once, and the host ran one
    turn for each marker."""
    rows = read_journal(run_dir.journal).rows
    assert rows[-1]["row"] == "ended" and rows[-1]["status"] == "completed"
    calls = {r["call"] for r in rows if r["row"] == "prepared"}
    assert [kinds(rows, call).count("completed") for call in sorted(calls)] == [1] * len(calls)
    assert "held" not in {r["row"] for r in rows}
    markers = [
        item["content"][0]["text"].split("\n", 1)[0]
        for thread in sim.state.threads.values()
        for turn in thread.turns
        for item in turn.items
        if item["type"] == "userMessage"
    ]
    assert len(markers) == len(set(markers)) == len(calls)


async def sim_script(sim: SimHost, script: dict[str, Any]) -> None:
    async with open_client(await connect_in_memory(sim)) as client:
        await client.request("sim/script", script)
