"""`crw flow status` of a finished, a running and a crashed run: real run processes
on a `crw host sim serve` host, the drill's owner process taking the steps.

What the user sees: the outcome with its reason, each call's attempt, turns,
tokens and time, the answers with --results, and the exact command of what to
do next; the human form fits 80 columns (a command is kept whole on its own line).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from crw.engine.run.locks import run_is_live
from crw.engine.run.rundir import RunDir
from tests.cli.test_pause_cancel import HANG
from tests.drill.test_crash_drill import CALL, Drill, alive, results, wait_until
from tests.drill.test_crash_drill import drill as drill  # the fixture: a served sim host

LOADED = 90.0
"""Seconds a finished run's owner may take to see the run end (15 s is the drill's)."""


def crashed_run(drill: Drill) -> RunDir:
    """A run whose process died (SIGKILL) right after its first step's row, before
    any owner took it: the rows say waiting_session, no process holds the run."""
    env = drill.crw.env | {"CRW_CRASH_AFTER": "step_published@explore.1"}
    out = drill.crw.start(str(drill.workflow), "--owner", drill.owner_thread,
                          "--host", f"unix:{drill.socket}", env=env)  # fmt: skip
    assert out.code == 0, out.stderr
    run = RunDir(Path(out.json()["run_dir"]))
    wait_until("the run process is gone", lambda: not alive(out.json()["pid"]))
    wait_until("its locks are let go", lambda: not run_is_live(run))
    return run


def status(drill: Drill, *args: str) -> Any:
    assert drill.run is not None
    result = drill.crw("flow", "status", drill.run.id, "--state", str(drill.crw.state), *args)
    assert result.code == 0, result.stderr
    return result.json() if "--json" in args else result.stdout.splitlines()


def assert_fits_80_columns(lines: list[str]) -> None:
    """Every line fits 80 columns but a command's, which is kept whole."""
    wide = [line for line in lines if len(line) > 80 and "crw flow " not in line]
    assert wide == []


def test_status_of_a_finished_run_tells_its_outcome_calls_and_answers(drill: Drill) -> None:
    drill.start(crash_after=None)
    drill.run_deadline = LOADED  # the owner sees the end late on a loaded machine
    rows = drill.finish()
    assert drill.run is not None
    run = drill.run.id
    view = status(drill, "--json")
    assert (view["state"], view["live"], view["holder_pid"]) == ("ended", False, None)
    assert view["outcome"] == {
        "state": "ended", "reason": "completed", "unfinished": {}, "held": [],
    }  # fmt: skip
    nodes = {"completed": 3, "total": 3}
    assert view["progress"] == {"done": 3, "total": 3, "in_flight": 0, "held": 0, "nodes": nodes}
    assert view["started_at"] == rows[0]["at"] and view["last_at"] == rows[-1]["at"]
    calls = {call["call"]: call for call in view["calls"]}
    assert list(calls) == ["explore.1", "build.1", "review.1"]
    build = calls[CALL]
    assert (build["node"], build["role"], build["state"]) == ("build", "executor", "completed")
    assert (build["attempts"], build["turns"]) == (1, 2)  # its first answer was repaired
    prepared = next(r for r in rows if r["row"] == "prepared" and r["call"] == CALL)
    completed = next(r for r in rows if r["row"] == "completed" and r["call"] == CALL)
    assert (build["started_at"], build["ended_at"]) == (prepared["at"], completed["at"])
    assert build["seconds"] > 0 and "result" not in build
    assert view["todo"] == [{"do": "nothing more to do: every node completed", "command": None}]

    answers = status(drill, "--json", "--results")
    assert {call["call"]: call["result"] for call in answers["calls"]} == results(rows)

    human = status(drill, "--results")
    assert human[0] == f"run {run}: ended (completed)"
    assert "  calls: 3 of 3 done" in human
    assert human[human.index("  calls: 3 of 3 done") + 1] == "  nodes: 3 of 3 completed"
    assert human[human.index("  calls: 3 of 3 done") + 3].split() == [
        "call", "role", "state", "att", "turns", "tokens", "time",
    ]  # fmt: skip
    assert [line.split()[:5] for line in human if line.startswith("  build.1 ")] == [
        ["build.1", "executor", "completed", "1", "2"]
    ]
    assert f'    answer: {{"summary": "{results(rows)[CALL]["summary"]}' in "\n".join(human)
    assert human[-2:] == ["  next:", "    nothing more to do: every node completed"]
    assert_fits_80_columns(human)


def test_status_of_a_running_run_shows_its_holder_the_call_in_flight_and_the_owners_command(
    drill: Drill,
) -> None:
    drill.host("sim/script", HANG)  # build's subagent works until it is interrupted
    drill.start(crash_after=None)
    assert drill.run is not None
    run, state = drill.run.id, str(drill.crw.state)
    wait_until("build's turn runs", lambda: any(
        r["row"] == "turn_started" and r.get("call") == CALL for r in drill.rows()
    ))  # fmt: skip
    pid = next(r["pid"] for r in drill.rows() if r["row"] == "started")
    view = status(drill, "--json")
    assert (view["state"], view["live"], view["holder_pid"]) == ("running", True, pid)
    # review not admitted yet; build in flight
    assert view["progress"] == {"done": 1, "total": 3, "in_flight": 1, "held": 0, "nodes": None}
    build = next(call for call in view["calls"] if call["call"] == CALL)
    assert (build["state"], build["turns"], build["ended_at"]) == ("running", 1, None)
    assert build["seconds"] >= 0  # until now
    next_ = f"crw flow next {run} --wait 30 --state {state}"
    assert view["todo"] == [
        {"do": "the owner takes its steps", "command": next_},
        {"do": "to stop it", "command": f"crw flow pause {run} --state {state}"},
    ]
    human = status(drill)
    assert human[0] == f"run {run}: running"
    assert f"  session backend, process 1; held by pid {pid}" in human
    assert human[-4:] == [
        "    the owner takes its steps:",
        f"      crw flow next {run} --wait 30 --state {state}",
        "    to stop it:",
        f"      crw flow pause {run} --state {state}",
    ]
    assert_fits_80_columns(human)


def test_status_of_a_crashed_run_says_no_process_holds_it_and_how_to_go_on(drill: Drill) -> None:
    drill.run = crashed_run(drill)
    run, state = drill.run.id, str(drill.crw.state)
    view = status(drill, "--json")
    assert (view["state"], view["live"], view["holder_pid"]) == ("crashed", False, None)
    assert view["rows_state"] == "waiting_session"
    assert [(c["call"], c["state"], c["attempts"]) for c in view["calls"]] == [
        ("explore.1", "waiting_session", 1)
    ]
    resume = f"crw flow resume {run} --detach --state {state}"
    assert view["todo"] == [
        {"do": "its process is gone (crashed or killed); go on with", "command": resume}
    ]
    human = status(drill)
    assert human[:3] == [
        f"run {run}: crashed",
        "  its process is gone: no paused or ended row, its rows leave it waiting_session",
        "  session backend, process 1; no process holds it",
    ]
    assert human[-3:] == [
        "  next:",
        "    its process is gone (crashed or killed); go on with:",
        f"      {resume}",
    ]
    assert_fits_80_columns(human)
