"""A model the host cannot reach, on the simulated host under the MockClock.

The simulated turn (`unreachable`) retries its model as codex 0.163.0 does when
the endpoint refuses connections: `error {willRetry: true}` at 0, 5, 15, 35 s
... after its start, never ending (tests/host/test_codex_unreachable.py runs the
real one). The call is held host_failure once the host has retried for
`unreachable_after` (60 s by default), and the rows say what the host said.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
from trio.testing import MockClock

from crw.actors.host_reader import ModelUnreachable, open_host_reader
from crw.actors.thread_watches import FOLLOWED_APP_SERVER
from crw.engine.answers import unreachable
from crw.host.client import open_client
from crw.host.protocol import TurnError
from crw.host.sim.connection import connect_in_memory
from crw.host.sim.server import open_sim_host
from crw.settings import DEFAULT_SETTINGS, Settings
from tests.actors.test_app_server_run import harness, kinds, terminal
from tests.actors.test_host_reader import _start

HELD = ["prepared", "step_published", "thread_started", "turn_started", "interrupt_requested"]


async def test_turn_the_host_keeps_retrying_is_held_host_failure_after_unreachable_after(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: HARV-14 (a model the host cannot reach is a host failure); the
    explorer's turn retries from 1 s in (its `seconds`), so it is held at 61 s
    with the retries of 1, 6, 16 and 36 s; the calls after it never run."""
    async with harness(tmp_path) as h:
        await h.script({"role": "explorer"}, unreachable=True)
        began = trio.current_time()
        # No fail_after here: under the autojump clock it fires while the journal
        # opens in a worker thread; pytest's timeout bounds a run that never ends.
        state, rows = await h.run()
    assert trio.current_time() - began == 1 + DEFAULT_SETTINGS.unreachable_after
    assert kinds(rows, "explore.1") == [*HELD, "held"]
    asked = next(r for r in rows if r["row"] == "interrupt_requested")
    assert (asked["reason"], asked["op"], asked["attempt"]) == ("host_failure", "explore.1/t1", 1)
    held = terminal(rows, "explore.1")
    assert held["reason"] == "host_failure"
    assert held["error"] == (
        "the model cannot be reached: the host said Reconnecting... waiting for network "
        "(Connection failed: error sending request) [responseStreamDisconnected], "
        "4 retries over 60 s; check the model provider's base_url and the network, "
        "then answer retry"
    )
    assert state == "waiting_decision"
    assert kinds(rows, "build.1") == []


def test_retries_are_given_up_only_after_the_bound() -> None:
    """The pure rule: no retry, no verdict; retries younger than the bound are
    waited for; the verdict names the newest error and the retries' span."""
    error = TurnError(message="Reconnecting...", codexErrorInfo="other")
    assert unreachable.verdict(None, 1000.0, 60.0) is None
    first = unreachable.retried(None, error, 10.0)
    again = unreachable.retried(first, error, 15.0)
    assert (again.first_at, again.count) == (10.0, 2)
    assert unreachable.gives_up_at(again, 60.0) == 70.0
    assert unreachable.verdict(again, 69.9, 60.0) is None
    verdict = unreachable.verdict(again, 70.0, 60.0)
    assert verdict is not None
    assert verdict.startswith(
        "the model cannot be reached: the host said Reconnecting... [other], 2 retries over 60 s"
    )


async def test_a_model_response_between_retries_starts_the_bound_again(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """A turn whose model answered once (a token count: a tool call's response, say)
    after retrying is not given up for the retries before that answer: the host
    retries at 1, 6, 16, 36, 76 s; a response at 30 s puts the bound's start at
    the retry of 36 s, so the turn is given up at 96 s, not 61 s."""
    usage = {"totalTokens": 10, "inputTokens": 8, "outputTokens": 2}
    async with (
        open_sim_host(tmp_path / "home") as sim,
        open_client(await connect_in_memory(sim), follows=FOLLOWED_APP_SERVER) as client,
        open_host_reader(
            client, Settings(host_poll_interval=600), follows=FOLLOWED_APP_SERVER
        ) as reader,
    ):
        thread_id, turn_id = await _start(reader, client, unreachable=True)
        began = trio.current_time()

        async def respond_at_30() -> None:
            await trio.sleep(30)
            tokens = {"total": usage, "last": usage, "modelContextWindow": 1000}
            params = {"threadId": thread_id, "turnId": turn_id, "tokenUsage": tokens}
            sim.broadcast.notify("thread/tokenUsage/updated", params, sim.state.threads[thread_id])

        async with trio.open_nursery() as nursery:
            nursery.start_soon(respond_at_30)
            with pytest.raises(ModelUnreachable, match="2 retries over 60 s"):
                await reader.wait_turn(thread_id, turn_id, give_up=True)
        assert trio.current_time() - began == 96
