"""`crw flow pause` and `crw flow cancel` with real processes: a `crw host sim serve`
host, a session run's process, the owner (`tests.drill.owner`) and the commands.

Every process is reaped at teardown by pid (the drill's `reap`).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from crw.engine.run.locks import run_is_live
from tests.cli.conftest import wait_for_exit
from tests.drill.test_crash_drill import CALL, Drill, drill_at, kill, served, wait_until

HANG = {"match": {"marker": f"{CALL}/*"}, "behaviour": {"hang": True}}


@pytest.fixture
def drill(tmp_path: Path) -> Iterator[Drill]:
    with served(drill_at(Drill, tmp_path)) as made:
        made.host("sim/script", HANG)  # build's subagent works until it is interrupted
        yield made


def kinds(rows: list[dict[str, Any]], call: str = CALL) -> list[str]:
    return [row["row"] for row in rows if row.get("call") == call]


def test_pause_interrupts_the_live_run_then_cancel_ends_it_and_both_are_idempotent(
    drill: Drill,
) -> None:
    """spec: HARV-28, HARV-29, HARV-31, ROWS-6, CMD-NEXT-2"""
    drill.start(crash_after=None)
    assert drill.run is not None
    run, state = drill.run.id, str(drill.crw.state)
    wait_until("build's turn runs", lambda: "turn_started" in kinds(drill.rows()))

    paused = drill.crw("flow", "pause", run, "--state", state, "--json")
    assert paused.code == 0, paused.stderr
    assert paused.json() | {"via": None} == {
        "run": run,
        "op": "pause",
        "state": "paused",
        "ended_status": None,
        "already": False,
        "via": None,
        "held": [CALL],
    }
    assert paused.json()["via"] == "process"
    rows = drill.rows()
    assert kinds(rows)[-3:] == ["turn_started", "interrupt_requested", "held"]
    assert rows[-1]["row"] == "paused" and rows[-1]["reason"] == "paused"
    wait_for_exit(drill.run.root)
    next_view = drill.crw("flow", "next", run, "--state", state, "--json")
    assert next_view.json()["state"] == "paused"

    again = drill.crw("flow", "pause", run, "--state", state)
    assert again.code == 0
    assert again.stdout == (
        f"run {run} is already paused; resume it with: crw flow resume {run} --detach "
        f"--state {state}\n"
    )

    cancelled = drill.crw("flow", "cancel", run, "--state", state, "--json")
    assert cancelled.code == 0, cancelled.stderr
    assert cancelled.json()["state"] == "ended"
    assert cancelled.json()["ended_status"] == "cancelled"
    rows = drill.rows()
    assert [r["row"] for r in rows[-2:]] == ["cancelled", "ended"]
    assert rows[-1]["status"] == "cancelled"

    refused = drill.crw("flow", "cancel", run, "--state", state)
    assert refused.code == 1
    assert refused.stderr == (
        f"crw: error: run {run} has ended (cancelled); there is nothing to cancel; "
        f"see it with: crw flow status {run} --state {state}\n"
    )
    as_json = drill.crw("flow", "cancel", run, "--state", state, "--json")
    assert as_json.code == 1 and as_json.stderr == ""
    assert as_json.json() == {
        "error": f"run {run} has ended (cancelled); there is nothing to cancel",
        "fix": f"see it with: crw flow status {run} --state {state}",
    }
    assert drill.rows() == rows


def test_pause_of_a_run_no_process_holds_launches_its_process_and_never_becomes_it(
    drill: Drill,
) -> None:
    """spec: HARV-28, HARV-31, HARV-35: the pause's own pid writes no started row"""
    drill.start(crash_after=None)
    assert drill.run is not None
    run, state = drill.run.id, str(drill.crw.state)
    wait_until("build's turn runs", lambda: "turn_started" in kinds(drill.rows()))
    drill.pause_owner()  # its next would resume the run
    (pid,) = [r["pid"] for r in drill.rows() if r["row"] == "started"]
    kill(pid)
    wait_until("the run is let go", lambda: not run_is_live(drill.run))
    dead = drill.rows()

    pause = drill.spawn("crw", "flow", "pause", run, "--state", state, "--json")
    assert pause.wait(timeout=60) == 0, (drill.root / "crw.stderr").read_text()
    drill.unpause_owner()
    rows = drill.rows()
    assert [r["row"] for r in rows[len(dead) :]] == [
        "started",
        "interrupt_requested",
        "held",
        "paused",
    ]
    started = rows[len(dead)]
    assert started["pid"] != pause.pid  # a process the pause launched, not the pause
    requested = rows[len(dead) + 1]
    assert requested["turn_id"] == [r for r in dead if r["row"] == "turn_started"][-1]["turn_id"]
    wait_until("the launched process lets the run go", lambda: not run_is_live(drill.run))
    counts, status = drill.subagent_turns()
    agent = [r for r in dead if r["row"] == "thread_started" and r["call"] == CALL][-1]
    assert status[agent["thread_id"]] != "active"
    assert counts[f"{CALL}/t1-a1"] == 1

    again = drill.crw("flow", "pause", run, "--state", state, "--json")
    assert again.code == 0 and again.json()["via"] == "none"
    launched = {r["pid"] for r in drill.rows() if r["row"] == "started"} - {pid}
    assert launched == {started["pid"]}


def test_pause_answers_with_the_process_it_launched(drill: Drill) -> None:
    """spec: HARV-28: `via` launched, and the pid of the process that stopped the calls"""
    drill.start(crash_after=None)
    assert drill.run is not None
    run, state = drill.run.id, str(drill.crw.state)
    wait_until("build's turn runs", lambda: "turn_started" in kinds(drill.rows()))
    drill.pause_owner()
    (pid,) = [r["pid"] for r in drill.rows() if r["row"] == "started"]
    kill(pid)
    wait_until("the run is let go", lambda: not run_is_live(drill.run))

    paused = drill.crw("flow", "pause", run, "--state", state, "--json")
    drill.unpause_owner()
    assert paused.code == 0, paused.stderr
    rows = drill.rows()
    assert paused.json()["via"] == "launched" and paused.json()["held"] == [CALL]
    assert paused.json()["pid"] == [r["pid"] for r in rows if r["row"] == "started"][-1]
    assert rows[-1]["row"] == "paused"


def test_resume_after_a_pause_runs_the_held_call_again_and_completes(drill: Drill) -> None:
    """spec: HARV-28, HARV-39: the call goes on as a new attempt, with no intent"""
    drill.start(crash_after=None)
    assert drill.run is not None
    run, state = drill.run.id, str(drill.crw.state)
    wait_until("build's turn runs", lambda: "turn_started" in kinds(drill.rows()))
    paused = drill.crw("flow", "pause", run, "--state", state)
    assert paused.code == 0, paused.stderr
    assert paused.stdout == (
        f"run {run} paused; held: {CALL}; resume it with: crw flow resume {run} --detach "
        f"--state {state}\n"
    )
    wait_until("the run is let go", lambda: not run_is_live(drill.run))
    drill.host("sim/script", {"match": {"marker": f"{CALL}/t2-a2"}, "behaviour": {}})

    resumed = drill.crw("flow", "resume", run, "--state", state, "--detach", "--json")
    assert resumed.code == 0, resumed.stderr
    rows = drill.finish()
    assert rows[-1]["row"] == "ended" and rows[-1]["status"] == "completed"
    after = kinds(rows)[kinds(rows).index("held") + 1 :]
    assert after == ["step_published", "thread_started", "turn_started", "completed"]
    assert [r["attempt"] for r in rows if r["row"] == "completed" and r["call"] == CALL] == [2]
