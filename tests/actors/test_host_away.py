"""A host that goes silent mid-run: the connection stays up, nothing answers.

Unlike a host whose connection closes (tests/actors/test_run_faults.py), nothing
tells the run the host is gone: it must find out by itself within a bounded time,
and say so in its rows, not show the call running for good. The whole run process
runs on the simulated host under one MockClock; the test freezes the host's end
of the run process's connection (messages to it are dropped, none come back).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import trio
from trio.testing import MockClock

from crw.actors import run as run_module
from crw.actors.run import run_process
from crw.clock import fixed_clock
from crw.engine.rundir import RunDir
from crw.engine.runspec import RunSpec, WorkflowRef
from crw.engine.workflow import load_workflow
from crw.host.client import open_client
from crw.host.sim.server import SimHost, connect_in_memory, open_sim_host
from crw.journal.log import read_journal
from crw.journal.replay import replay
from crw.settings import Settings
from tests.actors.test_app_server_run import CHAIN
from tests.actors.test_run_faults import Links
from tests.actors.test_session_run import RUN_ID, kinds

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


async def test_app_server_run_whose_host_goes_silent_mid_turn_says_so_within_the_bound(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The explorer's turn runs 600 s; the host goes silent 10 s in. Within one
    poll and host_timeout the call is held host_failure, its error naming the
    request the host did not answer, and the run waits for a decision (HARV-14)."""
    workflow_path = tmp_path / "wf.toml"
    workflow_path.write_text(CHAIN)
    workflow = load_workflow(workflow_path)
    run_dir = RunDir.of(tmp_path / "state", RUN_ID)
    run_dir.create()
    async with open_sim_host(tmp_path / "home") as sim:
        await sim_script(sim, {"match": {}, "behaviour": {"seconds": 600}})
        links = Links(sim)
        monkeypatch.setattr(run_module, "connect_host", links.connect)
        spec = RunSpec(
            id=RUN_ID,
            workflow=WorkflowRef(path=str(workflow_path), digest=workflow.digest),
            backend="app-server",
            pool=workflow.pool,
            host="unix:/nowhere.sock",
        )
        async with trio.open_nursery() as nursery:

            async def freeze_mid_turn() -> None:
                while "turn_started" not in kinds(read_journal(run_dir.journal).rows, "explore.1"):  # noqa: ASYNC110
                    await trio.sleep(1)
                await trio.sleep(10)
                freeze(links)
                frozen_at.append(trio.current_time())
                while "held" not in kinds(read_journal(run_dir.journal).rows, "explore.1"):  # noqa: ASYNC110
                    await trio.sleep(1)
                held_at.append(trio.current_time())

            nursery.start_soon(freeze_mid_turn)
            frozen_at: list[float] = []
            held_at: list[float] = []
            outcome = await run_process(
                run_dir, spec, tmp_path / "state", clock=fixed_clock(), settings=SETTINGS
            )
    took = held_at[0] - frozen_at[0]
    rows = read_journal(run_dir.journal).rows
    assert took <= BOUND + 1
    held = rows[-1]
    assert (held["row"], held["call"], held["reason"]) == ("held", "explore.1", "host_failure")
    thread = next(r for r in rows if r["row"] == "thread_started")["thread_id"]
    assert held["error"] == f"the host did not answer thread/read {thread} within 60 s"
    assert outcome == "waiting_decision"
    assert replay(rows).calls["explore.1"].state == "held"


async def sim_script(sim: SimHost, script: dict[str, Any]) -> None:
    async with open_client(await connect_in_memory(sim)) as client:
        await client.request("sim/script", script)
