"""The interrupt decisions, pure: which turn an interrupt reaches, and which turn an
intent goes with (spec: HARV-32..34, HARV-37..42), and the node's `timeout`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from crw.engine.calls.session_progress import progress
from crw.engine.config.workflow import load_workflow
from crw.engine.holds import interrupt
from crw.errors import InputError
from crw.journal.rows import StepPublished

CALL = "build.1"


def step(k: int = 1, attempt: int = 1, action: str = "spawn", **extra: Any) -> dict[str, Any]:
    return {
        "row": "step_published",
        "call": CALL,
        "k": k,
        "attempt": attempt,
        "op": f"{CALL}/t{k}",
        "marker": f"{CALL}/t{k}-a{attempt}",
        "action": action,
    } | extra


def thread(agent: str = "agent-1", attempt: int = 1) -> dict[str, Any]:
    return {"row": "thread_started", "call": CALL, "thread_id": agent, "attempt": attempt}


def turn(turn_id: str, k: int = 1, attempt: int = 1) -> dict[str, Any]:
    return {
        "row": "turn_started",
        "call": CALL,
        "k": k,
        "op": f"{CALL}/t{k}",
        "attempt": attempt,
        "turn_id": turn_id,
    }


def requested(turn_id: str, k: int = 1, attempt: int = 1) -> dict[str, Any]:
    return {
        "row": "interrupt_requested",
        "call": CALL,
        "reason": "paused",
        "op": f"{CALL}/t{k}",
        "attempt": attempt,
        "turn_id": turn_id,
    }


PREPARED = {"row": "prepared", "call": CALL, "node": "build"}


def test_a_spawn_step_no_subagent_was_bound_to_is_retracted_and_nothing_is_sent() -> None:
    """spec: HARV-32, HARV-34"""
    plan = interrupt.plan(progress([PREPARED, step()]))
    assert (plan.kind, plan.thread_id, plan.turn_id) == ("retract", None, None)


def test_a_send_input_step_not_bound_looks_its_known_subagent_up_first() -> None:
    """spec: HARV-33"""
    rows = [PREPARED, step(), thread(), turn("t1"), step(k=2, action="send_input", agent_id="a1")]
    plan = interrupt.plan(progress(rows))
    assert (plan.kind, plan.thread_id) == ("look_up", "a1")


def test_an_adopted_subagent_not_bound_to_its_turn_is_looked_up_first() -> None:
    """spec: HARV-33"""
    plan = interrupt.plan(progress([PREPARED, step(), thread("agent-9")]))
    assert (plan.kind, plan.thread_id) == ("look_up", "agent-9")


def test_a_bound_turn_is_interrupted() -> None:
    """spec: HARV-28"""
    plan = interrupt.plan(progress([PREPARED, step(), thread("agent-9"), turn("t1")]))
    assert (plan.kind, plan.thread_id, plan.turn_id) == ("interrupt", "agent-9", "t1")


def published(k: int = 1, attempt: int = 1) -> StepPublished:
    return StepPublished.model_validate(step(k=k, attempt=attempt))


def test_the_intent_goes_with_the_turn_of_its_step_and_attempt() -> None:
    """spec: HARV-37, HARV-42"""
    found = interrupt.intent([PREPARED, step(), thread(), turn("t1"), requested("t1")])
    assert found == interrupt.Intent("paused", f"{CALL}/t1", 1, "t1")
    assert interrupt.applies(found, published(), "t1")


def test_a_new_attempt_starts_with_no_intent() -> None:
    """spec: HARV-39"""
    found = interrupt.intent([PREPARED, step(), thread(), turn("t1"), requested("t1")])
    assert not interrupt.applies(found, published(attempt=2), "t9")


def test_a_step_published_again_starts_with_no_intent() -> None:
    """spec: HARV-40, HARV-42: the same step's new turn is another turn"""
    found = interrupt.intent([PREPARED, step(), thread(), turn("t1"), requested("t1")])
    assert not interrupt.applies(found, published(), "t2")


def test_a_turn_the_host_started_for_a_later_step_starts_with_no_intent() -> None:
    """spec: HARV-41"""
    found = interrupt.intent([PREPARED, step(), thread(), turn("t1"), requested("t1")])
    assert not interrupt.applies(found, published(k=2), "t2")


def test_a_call_prepared_again_carries_no_earlier_intent() -> None:
    """spec: HARV-42"""
    rows = [PREPARED, step(), thread(), turn("t1"), requested("t1"), PREPARED, step()]
    assert interrupt.intent(rows) is None


def test_cancel_rows_end_the_run_with_each_nodes_end() -> None:
    """spec: HARV-29"""
    rows = interrupt.run_rows("cancelled", "r1", ["a", "b", "c"], {"a": "completed", "b": "held"})
    assert [r.row for r in rows] == ["cancelled", "ended"]
    assert rows[1].model_dump()["status"] == "cancelled"
    assert rows[1].model_dump()["state"] == {"a": "completed", "b": "held", "c": "unrun"}
    assert [r.row for r in interrupt.run_rows("paused", None, ["a"], {})] == ["paused"]


NODE = '[[node]]\nid = "a"\nrole = "explorer"\ntask = "t"\nschema = { type = "object" }\n'


def test_a_nodes_timeout_is_read_in_seconds(tmp_path: Path) -> None:
    path = tmp_path / "w.toml"
    path.write_text('name = "w"\n' + NODE + "timeout = 90\n")
    assert load_workflow(path).nodes[0].timeout == 90


@pytest.mark.parametrize("value", ["0", "-5", '"1h"', "true", "inf", "nan"])
def test_a_timeout_that_is_no_number_of_seconds_is_refused_with_one_line(
    tmp_path: Path, value: str
) -> None:
    path = tmp_path / "w.toml"
    path.write_text('name = "w"\n' + NODE + f"timeout = {value}\n")
    with pytest.raises(InputError) as refused:
        load_workflow(path)
    assert str(refused.value) == (
        f"{path}:7: node 'a': timeout = {_shown(value)} is not a number of seconds above 0; "
        "give the call's deadline in seconds, e.g. timeout = 3600"
    )


def _shown(value: str) -> str:
    return {"inf": "Infinity", "nan": "NaN"}.get(value, value)
