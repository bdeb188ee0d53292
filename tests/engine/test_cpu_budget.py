"""A function run under a budget of its thread's CPU time is stopped once it spent
it, wherever it loops, and no stop lands after it returned."""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from typing import Any

import pytest

from crw.engine.answers import cpu_budget

BUDGET = 0.1
SLACK = 0.3


def _spin() -> None:
    while True:
        pass


def test_a_function_that_never_returns_is_stopped_at_its_budget() -> None:
    cpu = time.thread_time()
    with pytest.raises(cpu_budget.BudgetSpent, match=r"took longer than 0\.1 s of CPU"):
        cpu_budget.run(_spin, BUDGET)
    assert BUDGET <= time.thread_time() - cpu < BUDGET + SLACK


def test_a_stop_the_function_swallows_is_raised_again() -> None:
    swallowed = []

    def swallowing() -> None:
        try:
            _spin()
        except BaseException as stop:  # as a callback whose exception is dropped
            swallowed.append(stop)
        _spin()

    with pytest.raises(cpu_budget.BudgetSpent):
        cpu_budget.run(swallowing, BUDGET)
    assert len(swallowed) == 1


def test_a_sleeping_function_spends_no_cpu_and_returns() -> None:
    def sleeping() -> str:
        time.sleep(3 * BUDGET)
        return "done"

    assert cpu_budget.run(sleeping, BUDGET) == "done"


def test_no_stop_lands_after_the_function_returned_at_its_budget() -> None:
    def near_budget() -> str:
        until = time.thread_time() + BUDGET * 0.99
        while time.thread_time() < until:
            pass
        return "done"

    for _ in range(20):
        with contextlib.suppress(cpu_budget.BudgetSpent):
            cpu_budget.run(near_budget, BUDGET)
        after = time.monotonic() + 0.05
        while time.monotonic() < after:  # a stray stop would be raised here
            pass


def test_each_thread_has_its_own_budget() -> None:
    ended: list[str] = []

    def worker(name: str) -> None:
        try:
            cpu_budget.run(_spin, BUDGET)
        except cpu_budget.BudgetSpent:
            ended.append(name)

    threads = [threading.Thread(target=worker, args=(str(i),)) for i in range(3)]
    for thread in threads:
        thread.start()
    assert cpu_budget.run(lambda: "quick", BUDGET) == "quick"
    for thread in threads:
        thread.join(timeout=30)
    assert sorted(ended) == ["0", "1", "2"]
    assert cpu_budget.remaining() is None


def test_a_traced_function_still_runs_after_a_stop_was_taken() -> None:
    """A stop cleared rather than raised leaves the interpreter checking for one at
    every instruction, for good: a traced function then never returns."""
    with contextlib.suppress(cpu_budget.BudgetSpent):
        cpu_budget.run(_spin, BUDGET)
    assert cpu_budget.run(lambda: "quick", BUDGET) == "quick"
    lines: list[int] = []

    def traced() -> None:
        def tracer(frame: Any, event: str, arg: Any) -> Any:
            lines.append(frame.f_lineno)
            return None

        sys.settrace(tracer)
        try:
            sum(range(10))
            _count(5)
        finally:
            sys.settrace(None)

    worker = threading.Thread(target=traced, daemon=True)
    worker.start()
    worker.join(timeout=10)
    assert not worker.is_alive() and lines


def _count(n: int) -> int:
    return n if n <= 0 else _count(n - 1)


def test_a_watched_thread_that_ended_is_forgotten_and_budgets_still_hold() -> None:
    """A thread that ended while still watched (its clock gone: EINVAL) neither
    stops the watchdog nor keeps it from stopping the next thread over its budget."""
    clocks: list[int] = []
    gone = threading.Thread(target=lambda: clocks.append(time.pthread_getcpuclockid(
        threading.get_ident())))  # fmt: skip
    gone.start()
    gone.join()
    dead = gone.ident
    assert dead is not None and dead != threading.get_ident()
    with cpu_budget._lock:
        cpu_budget._watched[dead] = cpu_budget._Watch(clocks[0], 0.0)
    try:
        deadline = time.monotonic() + 10

        def spin_awhile() -> None:
            while time.monotonic() < deadline:
                pass

        with pytest.raises(cpu_budget.BudgetSpent):
            cpu_budget.run(spin_awhile, BUDGET)
        assert dead not in cpu_budget._watched
    finally:
        with cpu_budget._lock:
            cpu_budget._watched.pop(dead, None)


def test_quick_functions_one_after_another_wake_the_watchdog_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A run's answer checks come hundreds a second and take microseconds each: the
    watchdog keeps looking every _POLL while they come, so a check with at least
    that budget does not wake it (a thread switch a check before)."""
    monkeypatch.setattr(cpu_budget, "_LINGER", 600.0)
    rings = []
    ring = cpu_budget._ring

    def counted() -> None:
        rings.append(1)
        ring()

    monkeypatch.setattr(cpu_budget, "_ring", counted)
    for _ in range(40):
        assert cpu_budget.run(lambda: "done", cpu_budget._POLL) == "done"
        time.sleep(0.002)  # the watchdog, woken, finds nothing watched
    assert len(rings) <= 1


def test_a_short_budget_is_kept_while_a_long_one_is_watched() -> None:
    """The watchdog asleep until a long budget could be spent wakes for a newcomer
    whose budget ends sooner."""
    started, done = threading.Event(), threading.Event()

    def long_sleeper() -> None:
        started.set()
        done.wait(30)

    sleeper = threading.Thread(target=cpu_budget.run, args=(long_sleeper, 20.0))
    sleeper.start()
    try:
        started.wait(10)
        time.sleep(0.05)  # the watchdog looked, and sleeps until the 20 s could be spent
        cpu = time.thread_time()
        with pytest.raises(cpu_budget.BudgetSpent):
            cpu_budget.run(_spin, BUDGET)
        assert time.thread_time() - cpu < BUDGET + SLACK
    finally:
        done.set()
        sleeper.join()
