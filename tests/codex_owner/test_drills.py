"""Drills on a session run owned by a real Codex owner thread (shared app-server,
offline): a wake that starts the owner's next turn, a pause while a subagent's turn
runs, and a kill -9 of the run's process mid-turn. The subagent policy holds one
answer until the test lets it go, so the test acts while that turn runs. Each
runs on multi-agent v1 and v2 (`multi_agent`)."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest
import trio

from crw.engine.run.locks import holder_pid
from crw.engine.run.rundir import find_run
from crw.host.connect import connect_host
from crw.host.uri import HostUri
from tests.codex_owner.harness import TERMINAL, OwnedRun, owned_run
from tests.codex_owner.policy import HOLD_LIMIT, OwnerPolicy, Policies, SubagentPolicy
from tests.codex_owner.test_owned_run import CALLS, markers_asked, spoken

pytestmark = pytest.mark.codex

WAKE_LINE = "crw-flow-wake: run:"
BUILD = "build.1/t1-a1"


async def arrived(policies: Policies, marker: str) -> None:
    """Once the subagent's turn on `marker` asked the model (its turn runs)."""
    event = policies.subagent.arrived[marker]
    assert await trio.to_thread.run_sync(event.wait, HOLD_LIMIT), f"{marker} never asked"


def holding(marker: str) -> tuple[SubagentPolicy, Policies]:
    """Policies whose subagent holds its answer on `marker` until released."""
    subagent = SubagentPolicy()
    subagent.hold(marker)
    return subagent, Policies(OwnerPolicy(), subagent)


async def mid_turn(setup: OwnedRun, policies: Policies, marker: str) -> dict[str, Any]:
    """Once the held turn on `marker` runs and the run bound it: its thread_started row."""
    call = marker.split("/")[0]
    await arrived(policies, marker)
    bound = await setup.until_row("thread_started", lambda r: r["call"] == call)
    await setup.until_row("turn_started", lambda r: r["call"] == call)
    return bound


async def thread_turns(setup: OwnedRun, thread_id: str) -> list[dict[str, Any]]:
    socket = str(setup.server.socket_path)
    async with connect_host(HostUri("unix", socket)) as client:
        read = await client.request("thread/read", {"threadId": thread_id, "includeTurns": True})
        turns: list[dict[str, Any]] = read["thread"]["turns"]
        return turns


def ended_calls(rows: list[dict[str, Any]]) -> dict[str, str]:
    return {row["call"]: row["row"] for row in rows if row["row"] in TERMINAL}


async def test_a_wake_starts_the_owners_next_turn_and_the_owner_goes_on(
    tmp_path: Path, multi_agent: str
) -> None:
    """spec: WAKE-1, WAKE-2, WAKE-8 (the owner's turn ended while plan.1's turn ran,
    once it dispatched explore.1 and plan.1 in whichever order next handed them
    out; build.1 is published to an idle owner: the run starts a turn on it with
    the session_step_waiting message, and the owner takes the run to its end from it)"""
    subagent = SubagentPolicy()
    subagent.hold("plan.1/t1-a1")
    owner = OwnerPolicy(rest_after=frozenset({"explore.1/t1", "plan.1/t1"}))
    policies = Policies(owner, subagent)
    with owned_run(tmp_path, policies, multi_agent=multi_agent) as setup:
        await setup.begin()
        await arrived(policies, "plan.1/t1-a1")
        first = await setup.owner_idle()
        subagent.release()
        ended = await setup.until_row("ended")
        await setup.owner_idle()
        rows = setup.rows()
        turns = await thread_turns(setup, setup.owner)
        requests = setup.model.requests

    assert ended["status"] == "completed", rows
    assert spoken(rows) == {multi_agent}
    assert ended_calls(rows) == dict.fromkeys(CALLS, "completed")
    assert first["status"]["type"] == "idle"
    rested = [item.get("text", "") for item in turns[0]["items"] if item["type"] == "agentMessage"]
    assert rested[-1].endswith("waiting for its wake"), rested
    wakes = [r for r in rows if r["row"] in {"session_wake", "message_delivery"}]
    assert [r["row"] for r in wakes[:2]] == ["session_wake", "message_delivery"], wakes
    assert (wakes[1]["via"], wakes[1].get("status")) == ("turn", "delivered"), wakes[1]
    said = [turn["items"][0] for turn in turns]
    texts = [item["content"][0]["text"] for item in said if item["type"] == "userMessage"]
    assert texts[1].startswith(WAKE_LINE), texts
    assert "session_step_waiting: run " in texts[1] and "build.1/t1" in texts[1], texts[1]
    assert wakes[1]["turn_id"] == turns[1]["id"]
    answered = [r for r in requests if r.user_text == texts[1] and r.reply is not None]
    assert answered[0].reply.calls[0].arguments["cmd"].startswith("crw flow next ")  # type: ignore[union-attr]


async def test_a_pause_interrupts_the_real_turn_and_a_resume_finishes(
    tmp_path: Path, multi_agent: str
) -> None:
    """spec: HARV-28, HARV-31 (paused while build.1's subagent turn runs: interrupt_requested, the
    host's turn interrupted, build.1 held paused; resumed, build.1 goes on on a new
    attempt the owner spawns from a wake, and the run completes)"""
    subagent, policies = holding(BUILD)
    with owned_run(tmp_path, policies, multi_agent=multi_agent) as setup:
        await setup.begin()
        bound = await mid_turn(setup, policies, BUILD)
        run = setup.run_id()
        paused = setup.crw("flow", "pause", run, "--json")
        interrupted = await thread_turns(setup, bound["thread_id"])
        await setup.owner_idle()
        subagent.release()
        resumed = setup.crw("flow", "resume", run, "--detach", "--json")
        ended = await setup.until_row("ended")
        rows = setup.rows()
        asked = markers_asked(setup.model.requests)

    assert paused.returncode == 0, paused.stderr
    assert resumed.returncode == 0, resumed.stderr
    build = [(r["row"], r.get("reason")) for r in rows if r.get("call") == "build.1"]
    stop = build.index(("interrupt_requested", "paused"))
    assert build[stop + 1] == ("held", "paused"), build
    assert interrupted[-1]["status"] == "interrupted", interrupted[-1]
    assert ended["status"] == "completed", rows
    assert spoken(rows) == {multi_agent}
    assert ended_calls(rows) == dict.fromkeys(CALLS, "completed")
    again = [r for r in rows if r["row"] == "turn_started" and r["call"] == "build.1"]
    assert [(r["k"], r["attempt"]) for r in again] == [(1, 1), (2, 2)], again
    assert set(asked.values()) == {1}, asked


async def test_a_run_killed_mid_turn_is_resumed_by_next_and_finishes(
    tmp_path: Path, multi_agent: str
) -> None:
    """spec: ATT-27 (kill -9 of the run's process while build.1's subagent turn runs;
    the owner's next resumes the run, which adopts the bound subagent and reads its
    answer: no turn started twice, every call completed)"""
    subagent, policies = holding(BUILD)
    with owned_run(tmp_path, policies, multi_agent=multi_agent) as setup:
        await setup.begin()
        await mid_turn(setup, policies, BUILD)
        run_dir = find_run(setup.state, setup.run_id())
        pid = holder_pid(run_dir.run_lock)
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        subagent.release()
        ended = await setup.until_row("ended")
        rows = setup.rows()
        asked = markers_asked(setup.model.requests)
        resumed = [p for p in setup.run_pids() if p != pid]

    assert ended["status"] == "completed", rows
    assert spoken(rows) == {multi_agent}
    assert ended_calls(rows) == dict.fromkeys(CALLS, "completed")
    assert [r["pid"] for r in rows if r["row"] == "started"] == [pid, *resumed], rows
    kinds = [(r["row"], r.get("call")) for r in rows]
    restart = [i for i, kind in enumerate(kinds) if kind == ("started", None)][1]
    assert (
        kinds.index(("turn_started", "build.1")) < restart < kinds.index(("completed", "build.1"))
    )
    turns = [(r["call"], r["k"], r["attempt"]) for r in rows if r["row"] == "turn_started"]
    assert sorted(turns) == sorted((call, 1, 1) for call in CALLS), turns
    assert set(asked.values()) == {1}, asked
