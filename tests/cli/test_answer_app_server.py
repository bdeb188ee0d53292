"""`crw flow answer RUN CALL --retry` on an App Server run, with real processes: a
`crw host sim serve` host, the run's process, the answer and the resume it starts
(spec: ATT-32, CMD-NEXT-27). Every process is reaped at teardown by pid (the
drill's `reap`: the host, and each run process its started row names)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from crw.engine.run.locks import run_is_live
from tests.drill.test_app_server_crash_drill import AppDrill
from tests.drill.test_crash_drill import drill_at, served, wait_until

CALL = "build.1"
FAIL = {"httpConnectionFailed": {"httpStatusCode": 502}}


@pytest.fixture
def drill(tmp_path: Path) -> Iterator[AppDrill]:
    with served(drill_at(AppDrill, tmp_path / "run")) as made:
        yield made


def test_answer_retry_completes_a_held_app_server_call_on_its_thread(drill: AppDrill) -> None:
    """The host fails build's turn: the call is held host_failure and the run's
    process leaves it waiting_decision; `answer --retry` records the decision,
    resumes the run, and the call's turn is taken again on its thread (a new turn,
    k 2, attempt 2), repaired (k 3) and completes; the run ends completed."""
    drill.host("sim/script", {"match": {"marker": f"{CALL}/t1-*"}, "behaviour": {"fail": FAIL}})
    drill.start(crash_after=None)
    assert drill.run is not None
    run, state = drill.run.id, str(drill.crw.state)

    def let_go_held() -> bool:
        assert drill.run is not None
        held = any(r["row"] == "held" and r.get("call") == CALL for r in drill.rows())
        return held and not run_is_live(drill.run)

    wait_until("the run waits on a decision", let_go_held)

    answered = drill.crw("flow", "answer", run, CALL, "--retry", "--state", state, "--json")
    assert answered.code == 0, answered.stderr
    out = answered.json()
    assert (out["choice"], out["recorded"]) == ("retry", True)
    assert isinstance(out["resumed_pid"], int)
    drill.crw.pids.append(out["resumed_pid"])
    rows = drill.finish()
    assert rows[-1]["row"] == "ended" and rows[-1]["status"] == "completed"
    mine = [r for r in rows if r.get("call") == CALL]
    assert [r["row"] for r in mine] == [
        "prepared",
        "step_published",
        "thread_started",
        "turn_started",
        "held",
        "decision",
        "step_published",
        "turn_started",
        "step_published",
        "turn_started",
        "completed",
    ]  # build's first answer breaks its schema (the drill's script): one repair, at k 3
    assert mine[4]["reason"] == "host_failure"
    again = mine[6]
    assert (again["marker"], again["conversation_turn"], again["replaces_turn"]) == (
        "build.1/t2-a2",
        1,
        "build.1/t1-a1",
    )
    assert (mine[8]["marker"], mine[8]["conversation_turn"], mine[8]["repair"]) == (
        "build.1/t3-a2",
        2,
        True,
    )
    assert (mine[-1]["k"], mine[-1]["attempt"]) == (3, 2)
    turns = drill.turns_by_marker()
    assert [turns[f"{CALL}/{t}"] for t in ("t1-a1", "t2-a2", "t3-a2")] == [1, 1, 1]
