"""A session run whose subagent's model the host cannot reach: a real run process
on a `crw host sim serve` host, the drill's owner process taking the steps.

The build's subagent (`unreachable`) retries its model as codex does when the
endpoint refuses connections, from 0.1 s after its turn starts. With
`unreachable_after = 2` in the workflow's `[settings]`, the run interrupts the
turn and holds the call host_failure a little over 2 s after the first retry;
`status` and `next` say what the host said and what to do; `answer --retry`
goes on, and the run completes.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from crw.engine.held_fix import UNREACHABLE
from tests.cli.conftest import unfolded
from tests.cli.test_status_outcome import LOADED, assert_fits_80_columns
from tests.drill.test_crash_drill import CALL, WORKFLOW, Drill, wait_until
from tests.drill.test_crash_drill import drill as drill  # the fixture: a served sim host

GIVE_UP = 2.0
UNREACHABLE_BUILD = {
    "match": {"marker": f"{CALL}/t1-a1"},
    "behaviour": {"unreachable": True, "seconds": 0.1},
}


def seconds(row: dict[str, Any]) -> float:
    return datetime.fromisoformat(row["at"].replace("Z", "+00:00")).timestamp()


def flow(drill: Drill, verb: str, *args: str) -> Any:
    """`crw flow VERB RUN ARGS`: its JSON, or its lines."""
    assert drill.run is not None
    out = drill.crw("flow", verb, drill.run.id, *args, "--state", str(drill.crw.state))
    assert out.code == 0, out.stderr
    return out.json() if "--json" in args else out.stdout.splitlines()


def test_a_subagent_whose_model_cannot_be_reached_is_held_with_the_hosts_words(
    drill: Drill,
) -> None:
    """spec: HARV-14 (a real run process: the call held host_failure within
    unreachable_after of the host's first retry, not "running" for good)"""
    drill.workflow.write_text(f"{WORKFLOW}\n[settings]\nunreachable_after = {GIVE_UP}\n")
    drill.host("sim/script", UNREACHABLE_BUILD)
    drill.start(crash_after=None)
    wait_until("the build is held", lambda: any(
        r["row"] == "held" and r.get("call") == CALL for r in drill.rows()
    ))  # fmt: skip
    rows = [r for r in drill.rows() if r.get("call") == CALL]
    assert [r["row"] for r in rows] == [
        "prepared",
        "step_published",
        "thread_started",
        "turn_started",
        "interrupt_requested",
        "held",
    ]
    turn, asked, held = rows[3], rows[4], rows[5]
    assert (asked["reason"], asked["turn_id"], asked["error"]) == (
        "host_failure",
        turn["turn_id"],
        held["error"],
    )
    assert held["reason"] == "host_failure" and held["error"].startswith(
        f"{UNREACHABLE}the host said Reconnecting... waiting for network "
        "(Connection failed: error sending request) [responseStreamDisconnected]"
    )
    # The first retry comes after the step was published (the turn it retries
    # starts once the owner took the step), so the hold comes no sooner than the
    # bound after it. The drill's deadline is the hang guard; the upper bound is
    # proved under a MockClock (tests/actors/test_session_unreachable.py): here
    # the time includes the owner's processes on a loaded machine.
    took = seconds(held) - seconds(rows[1])
    assert took >= GIVE_UP, took

    status = flow(drill, "status", "--json")
    (call,) = [c for c in status["calls"] if c["call"] == CALL]
    assert (call["state"], call["reason"], call["error"]) == ("held", "host_failure", held["error"])
    assert call["fix"].startswith("the host could not reach the call's model")
    assert status["state"] == "waiting_decision"
    (waiting,) = flow(drill, "next", "--json")["held"]
    assert (waiting["call"], waiting["error"], waiting["fix"]) == (CALL, held["error"], call["fix"])
    human = flow(drill, "status")
    at = next(n for n, line in enumerate(human) if line.startswith("    held (host_failure): "))
    assert unfolded(human, at) == f"    held (host_failure): {' '.join(held['error'].split())}"
    state = str(drill.crw.state)  # a word never cut: the test's long state path
    assert_fits_80_columns([line for line in human if state not in line])

    drill.run_deadline = LOADED
    flow(drill, "answer", CALL, "--retry", "--json")
    rows = drill.finish()
    ended = rows[-1]
    assert (ended["row"], ended["status"]) == ("ended", "completed"), ended
    mine = [r for r in rows if r.get("call") == CALL][6:]
    # attempt 2 on a new subagent; the drill's build answers invalid JSON first: repaired
    assert [r["row"] for r in mine] == [
        "decision",
        "step_published",
        "thread_started",
        "turn_started",
        "step_published",
        "turn_started",
        "completed",
    ]
    assert [(r["k"], r["attempt"], r["action"]) for r in mine if r["row"] == "step_published"] == [
        (2, 2, "spawn"),
        (3, 2, "send_input"),
    ]
    assert drill.run is not None  # the held attempt's rows replay to the same decisions
    shadow = drill.crw("flow", "shadow", drill.run.id, "--state", str(drill.crw.state))
    assert shadow.code == 0, shadow.stdout
