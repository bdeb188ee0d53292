"""A host that stops answering while a turn runs, its connection open.

A session run follows a subagent's turn by the host's notifications and reads
whose failure it does not judge (ATT-6), so a host that stopped (SIGSTOP, a hung
process) would leave the call running for good. While a turn is followed the run
probes the host once every `host_timeout`; a probe left unanswered pauses the run
host_unavailable, and a resume goes on with the call in place. The run process
runs on the simulated host under one MockClock; the test freezes the host's end
of the run process's connection (`tests.actors.test_host_away.freeze`).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
from trio.testing import MockClock

from crw.actors.host_reader import open_host_reader
from crw.host.client import open_client
from crw.host.sim.connection import connect_in_memory
from crw.host.sim.server import open_sim_host
from crw.settings import Settings
from tests.actors.test_host_away import freeze
from tests.actors.test_host_reader import _start
from tests.actors.test_run_faults import (
    SETTINGS,
    assert_completed_once,
    session_run,
    when_written,
)
from tests.actors.test_session_run import kinds

TIMEOUT = SETTINGS.host_timeout
PROBE = "thread/loaded/list"


async def test_the_host_is_probed_once_an_interval_and_only_while_a_turn_is_followed(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """No probe while no turn is followed, however long; one every host_timeout
    while one is (for the reader, not for each turn); none once it ended."""
    settings = Settings(host_timeout=60, host_poll_interval=600)
    async with (
        open_sim_host(tmp_path / "home") as sim,
        open_client(await connect_in_memory(sim)) as client,
        open_host_reader(client, settings) as reader,
    ):
        await trio.sleep(1000)
        assert sim.served.get(PROBE, 0) == 0
        first = await _start(reader, client, seconds=330)
        second = await reader.start_thread(cwd="/w")
        turn = await reader.start_turn(second.id, "crw-flow-op: b.1/t1-a1\nCRW-ROLE: explorer\n")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(reader.wait_turn, *first)
            nursery.start_soon(reader.wait_turn, second.id, turn.id)
        assert sim.served.get(PROBE, 0) == 5  # at 60, 120, 180, 240 and 300 s of 330
        await trio.sleep(1000)
        assert sim.served.get(PROBE, 0) == 5


async def test_a_host_frozen_mid_turn_pauses_the_session_run_and_resume_goes_on_in_place(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """build.1's subagent turn runs 600 s; 10 s in, the host stops answering the
    run (its connection stays open). Within twice host_timeout the run is paused
    host_unavailable, the call keeps its rows (no held, nothing interrupted); the
    host answering again, a resume reads the same turn to its end: every call
    completes once, no turn run twice. spec: ATT-6"""
    slow = {"match": {"marker": "build.1/*"}, "behaviour": {"seconds": 600}}
    async with session_run(tmp_path, monkeypatch, [slow]) as (run, links, sim):
        frozen_at: list[float] = []
        paused_at: list[float] = []
        async with trio.open_nursery() as nursery:

            async def freeze_mid_turn() -> None:
                await when_written(run, "turn_started", "build.1")
                await trio.sleep(10)
                freeze(links)
                frozen_at.append(trio.current_time())
                with trio.move_on_after(3 * TIMEOUT):  # never noticed: fail, not hang
                    while run.rows()[-1]["row"] != "paused":  # noqa: ASYNC110
                        await trio.sleep(1)
                    paused_at.append(trio.current_time())
                if not paused_at:
                    nursery.cancel_scope.cancel()

            nursery.start_soon(freeze_mid_turn)
            outcome = await run.process()
        assert paused_at, f"the run never noticed the frozen host: {run.rows()[-1]}"
        assert outcome == "paused"
        paused = run.rows()
        assert await run.process() == "ended"  # the host answers the resumed process
        assert_completed_once(run, sim)
    assert TIMEOUT <= paused_at[0] - frozen_at[0] <= 2 * TIMEOUT + 1
    assert paused[-1]["reason"] == "host_unavailable"
    assert paused[-1]["error"] == (
        f"the host did not answer {PROBE} within {TIMEOUT:g} s while a turn ran: "
        "it stopped answering"
    )
    assert kinds(paused, "build.1")[-1] == "turn_started"
    assert not {"held", "interrupt_requested"} & {row["row"] for row in paused}
    resumed = run.rows()[len(paused) :]
    assert resumed[0]["row"] == "started"
    assert kinds(resumed, "build.1") == ["completed"]
