"""A held call answered with real processes: a `crw host sim serve` host, a session
run started with `crw flow start`, the process-level owner (`tests.drill.owner`)
playing with `crw flow next` and `crw flow dispatched`, and `crw flow answer`.
Every process is reaped by pid at teardown (the drill fixture)."""

from __future__ import annotations

from crw.engine.run.locks import run_is_live
from tests.drill.test_crash_drill import CALL, Drill, drill, wait_until

__all__ = ["drill"]


def test_a_held_call_answered_retry_completes(drill: Drill) -> None:
    """spec: ATT-32, CMD-NEXT-2, CMD-NEXT-27: build.1's first turn fails on the host,
    so the call is held and the run's process leaves the run waiting_decision;
    `next` says so and names the answer; `answer --retry` stores the decision,
    resumes the run, and a new attempt completes the call and the run."""
    drill.host("sim/script", {"match": {"marker": f"{CALL}/t1-a1"},
                              "behaviour": {"fail": "internalServerError"}})  # fmt: skip
    drill.start(crash_after=None)
    run = drill.run
    assert run is not None
    state = ("--state", str(drill.crw.state))
    wait_until(
        "the run waits on a decision with no process",
        lambda: any(r["row"] == "held" for r in drill.rows()) and not run_is_live(run),
    )
    view = drill.crw("flow", "next", run.id, *state, "--json").json()
    assert view["state"] == "waiting_decision"
    command = f"crw flow answer {run.id} {CALL} --retry --state {drill.crw.state}"
    assert command in view["hint"]
    answered = drill.crw("flow", "answer", run.id, CALL, "--retry", *state, "--json")
    assert answered.code == 0, answered.stderr
    assert isinstance(answered.json()["resumed_pid"], int)
    drill.crw.pids.append(answered.json()["resumed_pid"])
    rows = drill.finish()
    assert rows[-1]["row"] == "ended" and rows[-1]["status"] == "completed"
    mine = [r for r in rows if r.get("call") == CALL]
    held = next(i for i, r in enumerate(mine) if r["row"] == "held")
    assert [r["row"] for r in mine[held:]] == [
        "held",
        "decision",
        "step_published",
        "thread_started",
        "turn_started",
        "step_published",
        "turn_started",
        "completed",
    ]  # the drill's build answers invalid first: the new attempt repairs once
    assert mine[held + 2]["marker"] == f"{CALL}/t2-a2"
    assert mine[-1]["attempt"] == 2
    started = [r for r in rows if r["row"] == "started"]
    decision_seq = mine[held + 1]["seq"]
    assert started[-1]["seq"] > decision_seq
    assert started[-1]["pid"] == answered.json()["resumed_pid"]
