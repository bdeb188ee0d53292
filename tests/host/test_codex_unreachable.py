"""A private codex whose model endpoint refuses connections, run by the real actors.

codex 0.163.0 does not fail such a turn: it sends `error {willRetry: true}`
(`Reconnecting... waiting for network`) at growing intervals and keeps the turn in
progress. The run must say so within `unreachable_after`, from those
notifications: the turn is interrupted and the call held host_failure with what
the host said, instead of "running, tokens 0" for good. Real clock, bounded.
"""

from __future__ import annotations

import socket
import time
from pathlib import Path
from typing import Any

import pytest
import trio

from crw.actors.app_server_context import CallContext
from crw.actors.app_server_run import run_app_server_calls
from crw.actors.host_reader import open_host_reader
from crw.actors.journal_writer import open_journal_writer
from crw.actors.thread_watches import FOLLOWED_APP_SERVER
from crw.clock import fixed_clock
from crw.engine.config.roles import RoleTable
from crw.engine.config.workflow import load_workflow
from crw.host.client import HostClient, open_client
from crw.host.connect import connect_host
from crw.host.mock_model import write_codex_home
from crw.host.sim.connection import connect_in_memory
from crw.host.sim.server import open_sim_host
from crw.host.uri import parse_host_uri
from crw.journal.log import read_journal
from crw.journal.replay import replay
from crw.settings import Settings
from tests.host.codex_env import codex_env

pytestmark = pytest.mark.codex

GIVE_UP = 2.0
"""The run's unreachable_after here: codex's first retry comes ~0.3 s after the
turn starts, so the call is held ~2.3 s in."""
RUN_LIMIT = 30.0

EXPLORE = """
name = "lonely"

[[node]]
id = "explore"
role = "explorer"
task = "Find the files."
schema = { type = "object", required = ["files"], properties = { files = { type = "array" } } }
"""


def closed_port() -> int:
    """A loopback port nothing listens on: connections to it are refused."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def test_model_that_refuses_connections_holds_the_call_with_the_hosts_error(
    tmp_path: Path,
) -> None:
    """spec: HARV-14 (a host failure holds the call: the host retrying a model it
    cannot reach for unreachable_after is one)"""
    home = write_codex_home(tmp_path / "home", f"http://127.0.0.1:{closed_port()}/v1")
    (tmp_path / "wf.toml").write_text(EXPLORE)
    workflow = load_workflow(tmp_path / "wf.toml")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    settings = Settings(unreachable_after=GIVE_UP, host_poll_interval=0.5)
    began = time.monotonic()
    with trio.fail_after(RUN_LIMIT):
        async with (
            connect_host(
                parse_host_uri("codex"),
                env=codex_env(home),
                stderr=tmp_path / "codex.log",
                follows=FOLLOWED_APP_SERVER,
            ) as client,
            open_host_reader(client, settings, follows=FOLLOWED_APP_SERVER) as reader,
            open_journal_writer(run_dir / "journal.jsonl", clock=fixed_clock()) as journal,
        ):
            ctx = CallContext(
                journal=journal,
                reader=reader,
                workflow=workflow,
                run_dir=run_dir,
                tmpdir=None,
                pairs=RoleTable.undecided().roles,
            )
            started = replay([{"seq": 0, "row": "started", "backend": "app-server"}])
            state = await run_app_server_calls(ctx, workflow.pool, started)
    took = time.monotonic() - began

    rows = read_journal(run_dir / "journal.jsonl").rows
    assert [r["row"] for r in rows if r.get("call") == "explore.1"] == [
        "prepared",
        "step_published",
        "thread_started",
        "turn_started",
        "interrupt_requested",
        "held",
    ]
    turn = next(r for r in rows if r["row"] == "turn_started")
    asked = next(r for r in rows if r["row"] == "interrupt_requested")
    assert (asked["reason"], asked["turn_id"], asked["op"]) == (
        "host_failure",
        turn["turn_id"],
        "explore.1/t1",
    )
    held = rows[-1] if rows[-1]["row"] == "held" else next(r for r in rows if r["row"] == "held")
    assert held["reason"] == "host_failure"
    assert held["error"].startswith(
        "the model cannot be reached: the host said Reconnecting... waiting for network "
        "(Connection failed: error sending request) [responseStreamDisconnected], "
    )
    assert "check the model provider's base_url" in held["error"]
    assert state == "waiting_decision"
    # not given up before its bound; RUN_LIMIT is the hang guard, and
    # the upper bound is proved under a MockClock (tests/actors/test_session_unreachable.py)
    assert took >= GIVE_UP
    assert replay(rows).calls["explore.1"].state == "held"


async def first_retry(client: HostClient, cwd: Path) -> tuple[dict[str, Any], str]:
    """The first `error` notification of a turn, less its ids, and the turn's
    status read right after it."""
    with client.notifications(methods=frozenset({"error"})) as errors:
        thread = await client.thread_start(cwd=str(cwd), approvalPolicy="never")
        turn = await client.turn_start(thread.id, "crw-flow-op: x.1/t1-a1\nCRW-ROLE: explorer\n")
        note = await errors.receive()
    params = dict(note.params)
    assert (params.pop("threadId"), params.pop("turnId")) == (thread.id, turn.id)
    read = await client.thread_read(thread.id, include_turns=False)
    return params, read.status.type


async def test_simulated_unreachable_model_retries_as_codex_does(tmp_path: Path) -> None:
    """The simulated host's `unreachable` behaviour sends what codex 0.163.0 sends
    when its model's endpoint refuses connections, and keeps the thread active."""
    home = write_codex_home(tmp_path / "home", f"http://127.0.0.1:{closed_port()}/v1")
    with trio.fail_after(RUN_LIMIT):
        async with connect_host(
            parse_host_uri("codex"), env=codex_env(home), stderr=tmp_path / "codex.log"
        ) as client:
            real = await first_retry(client, tmp_path)
        async with (
            open_sim_host(tmp_path / "sim-home") as sim,
            open_client(await connect_in_memory(sim)) as client,
        ):
            behaviour = {"unreachable": True, "seconds": 0}
            await client.request("sim/script", {"match": {}, "behaviour": behaviour})
            simulated = await first_retry(client, tmp_path)
    real[0]["error"].pop("misalignment")  # a field crw does not read, null here
    assert simulated == real
    assert real[0]["willRetry"] is True and real[1] == "active"
