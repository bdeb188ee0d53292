"""`crw flow shadow` on a running run, a crashed one, and one killed mid-repair and
resumed: real processes (a `crw host sim serve` host, the session run's process
and the drill's owner), every one reaped at teardown by pid."""

from __future__ import annotations

from typing import Any

from crw.engine.run.locks import run_is_live
from tests.drill.test_crash_drill import CALL, Drill, drill, kill, killed_and_resumed, wait_until

__all__ = ["drill"]  # the drill's fixture: a sim host served, every process reaped


def _shadow(drill: Drill) -> dict[str, Any]:
    assert drill.run is not None
    out = drill.crw("flow", "shadow", drill.run.id, "--state", str(drill.crw.state), "--json")
    assert out.code == 0, out.stdout + out.stderr
    return out.json()


def test_a_running_run_and_the_same_run_crashed_replay_equal(drill: Drill) -> None:
    """spec: GEN-13, GEN-14"""
    hang = {"match": {"marker": f"{CALL}/*"}, "behaviour": {"hang": True}}
    drill.host("sim/script", hang)
    drill.start(crash_after=None)
    assert drill.run is not None
    run = drill.run
    wait_until("build's turn runs", lambda: f"{CALL}/t1" in _turns(drill.rows()))
    running = _shadow(drill)
    assert running["backend"] == "session" and running["equal"] is True
    assert running["checked"]["admission"] == 2 and "ended" not in running["checked"]
    drill.pause_owner()  # its next would resume the run
    (pid,) = [r["pid"] for r in drill.rows() if r["row"] == "started"]
    kill(pid)
    wait_until("the run is let go", lambda: not run_is_live(run))
    crashed = _shadow(drill)
    assert crashed["equal"] is True and crashed["rows"] == len(drill.rows())


def test_a_run_killed_after_its_repair_step_and_resumed_replays_equal(drill: Drill) -> None:
    """Two processes wrote the journal; the replay goes on across the second
    started row as the resumed run did. spec: GEN-13"""
    rows = killed_and_resumed(drill, f"step_published@{CALL}#2")
    assert sum(r["row"] == "started" for r in rows) == 2
    out = _shadow(drill)
    assert out["equal"] is True and out["checked"]["repair"] == 1 and out["checked"]["ended"] == 1


def _turns(rows: list[dict[str, Any]]) -> set[str]:
    return {str(r.get("op")) for r in rows if r["row"] == "turn_started"}
