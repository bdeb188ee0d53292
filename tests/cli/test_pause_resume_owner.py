"""A paused session run resumed with the command its pause prints goes on with its
owner, with real processes (a `crw host sim serve` host, the run's process, the
owner's commands): the calls the pause held go on in place and the journal says
so before any step file does, so `next` hands the owner the step (not a decision
to take) and the owner's loop takes the run to its end.

- a call waiting for its spawn at the pause (no subagent): looked up by its
  marker, nothing found, its step published again, row first;
- a call whose subagent ran its turn at the pause: the turn taken again by a new
  attempt on a new subagent (the next k, attempt 2, replacing the turn).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from tests.cli.conftest import Crw, wait_for_exit
from tests.cli.test_hints import _literally, _rows, _started, _wait
from tests.cli.test_owner_sim import VERB, _owner, _report, _script, bound
from tests.cli.test_resume_env import sim as sim
from tests.deadlines import LOADED

CALL = "explore.1"


def _paused_and_resumed(crw: Crw, run: str) -> int:
    """Pause `run`, then paste the resume its pause printed; the number of rows
    the journal held before the resume."""
    state = str(crw.state)
    paused = crw("flow", "pause", run, "--state", state)
    assert paused.code == 0, paused.stderr
    assert [r["reason"] for r in _rows(crw, run) if r["row"] == "held"] == ["paused"]
    steps = crw.state / "flow" / run / "steps" / CALL
    assert not list(steps.glob("t*.json"))  # the pause retracted the step, or the bind
    before = len(_rows(crw, run))
    went_on = _literally(crw, paused.stdout.rsplit("resume it with: ", 1)[1].strip())
    assert went_on.code == 0, went_on.stderr
    return before


def _mine(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The run's own rows and explore.1's (no session_wake, message_delivery: the
    owner's wake is the relay's timing)."""
    return [r for r in rows if r["row"] == "started" or r.get("call") == CALL]


def _next(crw: Crw, run: str, tmp_path: Path, wait: str = "0") -> dict[str, Any]:
    answer = crw("flow", "next", run, "--wait", wait, "--state", str(crw.state), "--json")
    assert answer.code == 0, answer.stderr
    (tmp_path / "next.json").write_text(answer.stdout)
    return answer.json()


def _owner_loop(crw: Crw, sim: Path, run: str, tmp_path: Path) -> list[tuple[str, int, str]]:
    """The owner's loop, as a step tells it: `next --wait`, each step's host call
    and the report it prints, until the run ends; (call, k, reply) of each spawn
    or send taken."""
    taken: list[tuple[str, int, str]] = []
    deadline = time.monotonic() + LOADED
    state = ""
    while state != "ended":
        assert time.monotonic() < deadline, f"the run did not end: {taken}"
        answer = _next(crw, run, tmp_path, wait="10")
        state = answer["state"]
        assert state in ("running", "waiting_session", "ended"), answer
        for step in answer["steps"]:
            verb = VERB[step["action"]]
            args = [verb, str(tmp_path / "next.json"), "--call", step["call"]]
            done = _owner(crw, *args, "--socket", str(sim))
            assert done.code == 0, done.stderr
            if verb != "close":
                reply = _report(crw, done.stdout)
                taken.append((step["call"], step["k"], bound(reply)))
    assert answer["ended_status"] == "completed", answer
    wait_for_exit(crw.state / "flow" / run)
    return taken


def test_a_call_paused_while_waiting_for_its_spawn_publishes_its_step_again_row_first(
    crw: Crw, sim: Path, tmp_path: Path
) -> None:
    """spec: ATT-35, ATT-21, STEP-21, HARV-32: explore.1's step was published and no
    subagent took it when the run was paused (the step retracted, the call held
    paused). The resumed process looks the marker up, finds nothing, and publishes
    the same step again: its step_published row (k, attempt, op, marker, input,
    packet and place of the first) is durable before the step file is back, so
    `next` answers waiting_session with the step and no answer to give; the
    owner's spawn of it is bound and the run completes."""
    _script(sim, {"seconds": 5})  # each turn ends after the owner's report
    run, _owner_id = _started(crw, sim, tmp_path)
    step_file = crw.state / "flow" / run / "steps" / CALL / "t1-a1.json"
    first = next(r for r in _rows(crw, run) if r["row"] == "step_published")
    before = _paused_and_resumed(crw, run)
    _wait("the step file written again", step_file.exists)
    after = _mine(_rows(crw, run)[before:])  # the row came first: it is here already
    assert [r["row"] for r in after] == ["started", "step_published"]
    again = after[1]
    same = ("k", "attempt", "op", "marker", "action", "input_digest", "packet")
    assert {k: again.get(k) for k in same} == {k: first.get(k) for k in same}
    assert {k: again.get(k) for k in ("packet_digest", "conversation_turn", "role")} == {
        k: first.get(k) for k in ("packet_digest", "conversation_turn", "role")
    }
    assert again["seq"] > after[0]["seq"] and "call_tokens" not in again
    shown = _next(crw, run, tmp_path)
    assert shown["state"] == "waiting_session" and "held" not in shown, shown
    assert [(s["call"], s["k"], s["attempt"]) for s in shown["steps"]] == [(CALL, 1, 1)]
    assert "crw flow answer" not in shown["hint"], shown["hint"]

    taken = _owner_loop(crw, sim, run, tmp_path)
    assert taken == [(CALL, 1, "bound"), ("build.1", 1, "bound")]
    rows = _mine(_rows(crw, run)[before:])
    assert [r["row"] for r in rows] == [
        "started",
        "step_published",
        "thread_started",
        "turn_started",
        "completed",
    ]
    assert rows[3]["k"] == 1 and rows[2]["marker"] == f"{CALL}/t1-a1"


def test_a_call_paused_in_its_running_turn_goes_on_with_a_new_attempt_the_owner_takes(
    crw: Crw, sim: Path, tmp_path: Path
) -> None:
    """spec: ATT-30, ATT-32, ATT-43, ATT-44: explore.1's subagent ran its turn when
    the run was paused (interrupted, held paused). The resumed process finds it
    running nothing and publishes the turn again as attempt 2 at k 2, the same
    conversation place, replacing t1-a1, row first; `next` hands it to the owner,
    whose spawn is bound, and the run completes."""
    _script(sim, {"seconds": 60})  # explore.1's first turn runs until it is interrupted
    run, owner = _started(crw, sim, tmp_path)
    step_file = crw.state / "flow" / run / "steps" / CALL / "t1-a1.json"
    spawned = _owner(crw, "spawn", str(step_file), "--socket", str(sim), "--owner", owner)
    assert spawned.code == 0, spawned.stderr
    _wait("explore.1's turn", lambda: "turn_started" in [r["row"] for r in _rows(crw, run)])
    _script(sim, {"seconds": 5})  # every later turn ends after the owner's report
    before = _paused_and_resumed(crw, run)
    k2 = crw.state / "flow" / run / "steps" / CALL / "t2-a2.json"
    _wait("the new attempt's step file", k2.exists)
    after = _mine(_rows(crw, run)[before:])
    assert [r["row"] for r in after] == ["started", "step_published"]
    again = after[1]
    assert {
        k: again.get(k)
        for k in ("k", "attempt", "op", "marker", "action", "conversation_turn", "replaces_turn")
    } == {
        "k": 2,
        "attempt": 2,
        "op": f"{CALL}/t2",
        "marker": f"{CALL}/t2-a2",
        "action": "spawn",
        "conversation_turn": 1,
        "replaces_turn": f"{CALL}/t1-a1",
    }
    assert "the run was resumed" in again["note"]
    shown = _next(crw, run, tmp_path)
    assert shown["state"] == "waiting_session" and "held" not in shown, shown
    steps = [(s["call"], s["action"], s.get("k"), s["attempt"]) for s in shown["steps"]]
    assert steps == [(CALL, "close", None, 1), (CALL, "spawn", 2, 2)], steps  # t1-a1's close

    taken = _owner_loop(crw, sim, run, tmp_path)
    assert taken == [(CALL, 2, "bound"), ("build.1", 1, "bound")]
    rows = _mine(_rows(crw, run)[before:])
    assert [r["row"] for r in rows] == [
        "started",
        "step_published",
        "thread_started",
        "turn_started",
        "completed",
    ]
