"""A held call that goes on in place with its published, unbound send_input repair
counts each turn's tokens once (spec: HARV-21, HARV-23, HARV-24, STEP-16, ATT-35).

The repair step's step_published row records tokens_seen and call_tokens, what the
task turn counted; the held row the call ended with carries those call tokens too.
A call answered retry (or a paused one, resumed) looks the step up by its marker
and goes on with it: its turns counted before the held row are in that row, so
the terminal row it ends with carries only what the repair adds, and the run's
figure (the rows' RunSpent, and the process's spent(), which the paused row of a
reached token_ceiling records) counts every turn once.

The harnesses of `test_session_run` and `test_session_interrupt` (the simulated
host, a scripted owner, one MockClock). The chain workflow: explore's one turn
counts 110; build's task turn answers against its schema and counts 1100, its
repair 1100 more; the ceiling is met once build ends, so the run pauses before
review with the process's figure in the paused row.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio
from trio.testing import MockClock

from crw.bus import steps as bus
from crw.journal.replay import replay
from tests.actors.test_held_in_place import answer
from tests.actors.test_session_interrupt import go, has
from tests.actors.test_session_resume import KillPoint, last, remembering
from tests.actors.test_session_run import Harness, harness, kinds

Rows = list[dict[str, Any]]
CALL = "build.1"
TURN = {"input": 1000, "output": 100}  # total 1100
SMALL = {"input": 100, "output": 10}  # total 110
REAL = 110 + 1100 + 1100
"""The real sum of the turns before review: explore's, build's task and repair."""


async def held_with_repair_unbound(
    h: Harness, monkeypatch: pytest.MonkeyPatch, *, pause: bool
) -> Rows:
    """The chain workflow with a ceiling of REAL; build's task turn answers wrong and
    its repair (send_input) waits for the owner, which has not taken it, until the
    call is held: by its deadline, or by a pause when `pause`. The owner, slow, has
    not taken the held call's close step yet when it delivers the repair it had
    read (late), and that turn ends. The rows the run left."""
    wf = h.run.root.parent / "wf.toml"
    text = wf.read_text().replace("pool = 2\n", f"pool = 2\ntoken_ceiling = {REAL}\n")
    if not pause:
        text = text.replace('needs = ["explore"]\n', 'needs = ["explore"]\ntimeout = 600\n')
    wf.write_text(text)
    owner = remembering(h)
    owner.taken[(CALL, 2, 1)] = "delivered late, by the test"
    await h.script({"marker": "explore.1/*"}, tokens=SMALL)
    await h.script({"marker": f"{CALL}/*"}, invalidFirst=True, tokens=TURN, seconds=1)
    with monkeypatch.context() as patch:
        patch.setattr(bus, "list_closes", lambda run: [])  # the owner closes nothing yet
        state, held = await go(h, stop_when=has("step_published", k=2) if pause else None)
    assert state == ("paused" if pause else "waiting_decision")
    assert last(held, "held")["reason"] == ("paused" if pause else "deadline")
    repair = last(held, "step_published")
    params = {"target": repair["agent_id"], "message": repair["input"]}
    await h.client.request("sim/sendInput", params)
    await trio.sleep(10)
    return held


def counted_once(rows: Rows, held: Rows) -> None:
    """The repair step recorded the task turn's count; the held row carried it; the
    call's terminal rows and the run's figure count each turn once."""
    repair = last(held, "step_published")
    assert (repair["action"], repair["k"]) == ("send_input", 2)
    assert repair["tokens_seen"]["total"] == repair["call_tokens"]["total"] == 1100
    assert last(held, "held")["tokens"]["total"] == 1100
    assert last(rows, "completed")["tokens"]["total"] == 1100  # what the repair added
    run = replay(rows)
    assert run.calls[CALL].tokens["total"] == 2200
    assert run.spent["total"] == REAL
    (paused,) = [r for r in rows if r["row"] == "paused" and r["reason"] == "token_ceiling"]
    assert paused["tokens"]["total"] == REAL  # the process's spent()


async def test_a_retried_call_binds_its_unbound_repair_and_counts_the_task_turn_once(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: HARV-21, HARV-23, HARV-24, ATT-35: answered retry, the held call looks
    its published, unbound repair up by its marker, binds the turn the owner
    started and counts only what that turn adds."""
    async with harness(tmp_path) as h:
        held = await held_with_repair_unbound(h, monkeypatch, pause=False)
        answer(h.run, "retry")
        state, rows = await go(h)
    assert kinds(rows[len(held) :], CALL) == ["decision", "turn_started", "completed"]
    counted_once(rows, held)
    assert state == "paused" and kinds(rows, "review.1") == []


async def test_a_retried_repair_counts_once_after_a_process_kill(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: HARV-21, HARV-22, HARV-23, HARV-24: the process that binds the retried
    repair dies right after its turn_started; the resumed one takes the step's
    call_tokens from the rows, which the held row carries already."""
    async with harness(tmp_path) as h:
        held = await held_with_repair_unbound(h, monkeypatch, pause=False)
        answer(h.run, "retry")
        kill = KillPoint("turn_started", CALL)
        with kill.scope:
            await go(h, after_commit=kill.after_commit)
        assert kill.scope.cancelled_caught
        state, rows = await go(h)
    assert kinds(rows[len(held) :], CALL) == ["decision", "turn_started", "completed"]
    counted_once(rows, held)
    assert state == "paused"


async def test_a_call_paused_with_its_repair_unbound_counts_the_task_turn_once_on_resume(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: HARV-21, HARV-23, HARV-24: a pause holds build (paused) while its repair
    waits; the resumed run goes on with that step in place."""
    async with harness(tmp_path) as h:
        held = await held_with_repair_unbound(h, monkeypatch, pause=True)
        state, rows = await go(h)
    assert kinds(rows[len(held) :], CALL) == ["turn_started", "completed"]
    counted_once(rows, held)
    assert state == "paused"


async def test_a_retried_repair_whose_subagent_the_hold_closed_goes_to_a_new_subagent(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: STEP-26, ATT-33, ATT-35, HARV-24: the hold closed build.1's subagent
    (the owner took its close step) before the repair reached it. Answered retry,
    the marker is looked up on that subagent first; not there, the repair cannot
    be sent to it again: a new attempt spawns it on a new subagent, with the
    answer it repairs, and the call completes counting each turn once."""
    async with harness(tmp_path) as h:
        wf = h.run.root.parent / "wf.toml"
        text = wf.read_text().replace("pool = 2\n", f"pool = 2\ntoken_ceiling = {REAL}\n")
        wf.write_text(text.replace('needs = ["explore"]\n', 'needs = ["explore"]\ntimeout = 600\n'))
        owner = remembering(h)
        owner.taken[(CALL, 2, 1)] = "never taken"
        await h.script({"marker": "explore.1/*"}, tokens=SMALL)
        await h.script({"marker": f"{CALL}/t1-a1"}, answer={"wrong": 1}, tokens=TURN)
        await h.script({"marker": f"{CALL}/t3-a2"}, tokens=TURN)
        with monkeypatch.context() as patch:  # the test, not the owner, takes the close
            patch.setattr(bus, "list_closes", lambda run: [])
            state, held = await go(h)
        first = last(held, "thread_started")["thread_id"]
        assert state == "waiting_decision"
        (close,) = [c for c in bus.list_closes(h.run) if c.call == CALL]  # the hold's
        await h.client.request("sim/closeAgent", {"target": close.agent_id})
        bus.remove_close(h.run, close.call, close.attempt, close.agent_id)
        assert close.agent_id == first and h.sim.state.threads[first].status == "notLoaded"
        answer(h.run, "retry")
        state, rows = await go(h)
    assert kinds(rows[len(held) :], CALL) == [
        "decision",
        "step_published",
        "thread_started",
        "turn_started",
        "completed",
    ]
    unsent, step = last(held, "step_published"), last(rows, "step_published")
    assert (step["action"], step["k"], step["attempt"], step["marker"]) == (
        "spawn",
        3,
        2,
        f"{CALL}/t3-a2",
    )
    assert (step["conversation_turn"], step["repair"]) == (2, True)
    assert step.get("replaces_turn") is None  # the repair never ran: no turn to replace
    assert unsent["previous_answer"] == '{"wrong": 1}' and "previous_answer" not in step
    assert step["previous_answer_in"] == unsent["marker"]
    assert step["repair_errors"] == unsent["repair_errors"]
    assert "the call was held (deadline" in step["note"]
    assert last(rows, "thread_started")["thread_id"] != first
    assert last(rows, "completed")["tokens"]["total"] == 1100
    assert replay(rows).spent["total"] == REAL
    assert state == "paused" and kinds(rows, "review.1") == []
