"""The wake decisions over plain data: which steps wait, when and under which id."""

from __future__ import annotations

from crw.engine.owner import wake
from crw.engine.owner.wake import Escalate, Timers, Waiting, Wake, WakePlan, fold

TIMERS = Timers(wake_after=900.0, renotify_max=3600.0, unresponsive_after=7200.0)


def published(call: str, k: int = 1) -> dict[str, object]:
    return {"row": "step_published", "call": call, "op": f"{call}/t{k}", "k": k}


def test_a_step_waits_from_its_publication_until_its_turn_is_bound_or_its_call_ends() -> None:
    """spec: WAKE-9"""
    waiting = fold(Waiting(), [published("a.1"), published("b.1")])
    assert waiting.ops == ["a.1/t1", "b.1/t1"] and waiting.published == 2
    bound = fold(
        waiting, [{"row": "thread_started", "call": "a.1"}, {"row": "turn_started", "call": "a.1"}]
    )
    assert bound.ops == ["b.1/t1"] and bound.binds == 1
    ended = fold(bound, [{"row": "held", "call": "b.1"}])
    assert ended.ops == [] and ended.binds == 1


def test_the_logical_id_names_the_run_the_batch_the_process_and_the_renotification() -> None:
    """spec: WAKE-5, WAKE-6, WAKE-14"""
    batch = wake.batch_of(["b.1/t1", "a.1/t1"])
    assert batch == wake.batch_of(["a.1/t1", "b.1/t1"]) != wake.batch_of(["a.1/t1"])
    assert wake.wake_id("r1", batch, 1, 0) == f"run:r1/{batch}"
    assert wake.wake_id("r1", batch, 2, 0) == f"run:r1/{batch}/e2"
    assert wake.wake_id("r1", batch, 3, 2) == f"run:r1/{batch}/e3/r2"
    assert wake.process_number([{"row": "started"}, {"row": "prepared"}, {"row": "started"}]) == 2


def test_a_publication_wakes_only_an_idle_or_not_loaded_owner() -> None:
    """spec: WAKE-1"""
    for status, wakes in (("idle", True), ("notLoaded", True), ("active", False)):
        plan = WakePlan("r1", 1, TIMERS)
        assert plan.observe(fold(Waiting(), [published("a.1")]), 10.0)
        assert (plan.publication(status, 10.0) is not None) is wakes


def test_renotifications_double_up_to_an_hour_and_the_escalation_comes_once_at_two_hours() -> None:
    """spec: WAKE-9, WAKE-10, WAKE-11, WAKE-12"""
    plan = WakePlan("r1", 1, TIMERS)
    plan.observe(fold(Waiting(), [published("a.1")]), 0.0)
    seen: list[tuple[float, str, int]] = []
    while (now := plan.deadline()) < 5 * 3600:
        for due in plan.due(now):
            seen.append((now, "wake", due.renotify) if isinstance(due, Wake) else (now, "esc", 0))
    assert seen == [
        (900.0, "wake", 1),
        (2700.0, "wake", 2),
        (6300.0, "wake", 3),
        (7200.0, "esc", 0),
        (9900.0, "wake", 4),
        (13500.0, "wake", 5),
        (17100.0, "wake", 6),
    ]


def test_a_bind_starts_the_count_again_and_no_step_waiting_stops_it() -> None:
    """spec: WAKE-9"""
    plan = WakePlan("r1", 1, TIMERS)
    waiting = fold(Waiting(), [published("a.1"), published("b.1")])
    plan.observe(waiting, 0.0)
    assert [type(d) for d in plan.due(900.0)] == [Wake]
    waiting = fold(waiting, [{"row": "turn_started", "call": "a.1"}])
    assert not plan.observe(waiting, 1000.0)
    assert plan.deadline() == 1900.0
    late = plan.due(8200.0)
    assert [type(d) for d in late] == [Wake, Escalate]
    assert isinstance(late[0], Wake) and late[0].ops == ["b.1/t1"] and late[0].renotify == 1
    plan.observe(fold(waiting, [{"row": "turn_started", "call": "b.1"}]), 8300.0)
    assert plan.deadline() == float("inf") and plan.due(99999.0) == []
