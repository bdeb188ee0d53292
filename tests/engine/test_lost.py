"""The lost rule over host snapshots, without Trio: when an attempt is lost, when
it is waited for, and what follows a lost attempt (spec: ATT-1..7, ATT-24)."""

from __future__ import annotations

from typing import Any

import pytest

from crw.engine.calls import lost
from crw.engine.calls.lost import Ended, Found, Lost, Seen, Unknown, Unreadable, Wait, judge
from crw.host.protocol import Thread, Turn
from crw.journal.rows import Held, StepPublished, Tokens
from crw.settings import INTERRUPTED_SETTLE_MIN, Settings

SETTINGS = Settings(lost_after=600.0, poll_interval=2.0, host_poll_interval=30.0)
TURN = "turn-1"
MARKER = "build.1/t1-a1"
FIRST = Seen()


def thread(status: str, turn_status: str = "inProgress", error: bool = False) -> Thread:
    turn: dict[str, Any] = {
        "id": TURN,
        "status": turn_status,
        "items": [
            {
                "type": "userMessage",
                "id": "u",
                "content": [{"type": "text", "text": f"crw-flow-op: {MARKER}\nCRW-ROLE: x"}],
            }
        ],
    }
    if error:
        turn["error"] = {"message": "boom", "codexErrorInfo": "other"}
    return Thread.model_validate({"id": "agent-1", "status": {"type": status}, "turns": [turn]})


def twice(read: lost.HostRead, seen: Seen = FIRST, now: float = 0.0) -> lost.Decision:
    """Judge a read, and once more the same read when the first asks for it."""
    first = judge(read, seen, now, SETTINGS, turn_id=TURN)
    if isinstance(first, Wait) and first.seen.recheck:
        return judge(read, first.seen, now, SETTINGS, turn_id=TURN)
    return first


@pytest.mark.parametrize("status", ["notLoaded", "systemError", "idle", "active"])
def test_a_completed_marker_turn_is_never_lost(status: str) -> None:
    """spec: ATT-1"""
    decision = twice(thread(status, "completed"), now=10_000.0)
    assert isinstance(decision, Ended) and decision.turn.status == "completed"


@pytest.mark.parametrize("status", ["idle", "active"])
def test_a_live_thread_is_never_judged_lost(status: str) -> None:
    """spec: ATT-2, ATT-7"""
    seen = Seen(("x", None, 0, False), since=0.0)
    decision = twice(thread(status), seen, now=10 * SETTINGS.lost_after)
    assert isinstance(decision, Wait) and not decision.seen.recheck
    assert decision.until == 10 * SETTINGS.lost_after + SETTINGS.host_poll_interval


@pytest.mark.parametrize("status", ["notLoaded", "systemError"])
@pytest.mark.parametrize(
    ("turn_status", "reason"),
    [("interrupted", "turn_interrupted"), ("failed", "turn_failed_without_error")],
)
def test_a_dead_thread_whose_turn_ended_without_an_error_is_lost(
    status: str, turn_status: str, reason: str
) -> None:
    """spec: ATT-2, ATT-3"""
    decision = twice(thread(status, turn_status))
    assert decision == Lost(reason, status, turn_status, TURN)  # type: ignore[arg-type]


def test_a_turn_that_failed_with_an_error_is_harvested_not_lost() -> None:
    """spec: ATT-3 (a failure with an error is the harvest's TurnOutcome.Failed)"""
    decision = twice(thread("systemError", "failed", error=True))
    assert isinstance(decision, Ended)


@pytest.mark.parametrize("read", [thread("notLoaded"), Unknown()], ids=["notLoaded", "unknown"])
def test_an_unchanged_turn_on_a_dead_thread_is_lost_after_lost_after_and_not_before(
    read: lost.HostRead,
) -> None:
    """spec: ATT-4, ATT-2"""
    first = judge(read, Seen(), 100.0, SETTINGS, turn_id=TURN)
    assert isinstance(first, Wait) and first.seen.since == 100.0
    assert first.until == 100.0 + SETTINGS.host_poll_interval
    almost = judge(read, first.seen, 100.0 + 599.0, SETTINGS, turn_id=TURN)
    assert isinstance(almost, Wait) and almost.until == 100.0 + 600.0  # the very deadline
    due = twice(read, first.seen, 100.0 + 600.0)
    status = "unknown" if isinstance(read, Unknown) else "notLoaded"
    turn_status = "unknown" if isinstance(read, Unknown) else "inProgress"
    assert due == Lost("turn_unchanged", status, turn_status, TURN)


def test_a_change_restarts_the_lost_after_time() -> None:
    """spec: ATT-4"""
    first = judge(thread("notLoaded"), Seen(), 0.0, SETTINGS, turn_id=TURN)
    assert isinstance(first, Wait)
    changed = judge(thread("systemError"), first.seen, 500.0, SETTINGS, turn_id=TURN)
    assert isinstance(changed, Wait) and changed.seen.since == 500.0
    assert isinstance(twice(thread("systemError"), changed.seen, 1000.0), Wait)


def test_the_thread_is_read_once_more_before_the_attempt_is_lost() -> None:
    """spec: ATT-5"""
    first = judge(thread("notLoaded", "interrupted"), Seen(), 0.0, SETTINGS, turn_id=TURN)
    assert isinstance(first, Wait) and first.seen.recheck
    assert first.until == SETTINGS.poll_interval
    came_back = judge(thread("idle", "completed"), first.seen, 1.0, SETTINGS, turn_id=TURN)
    assert isinstance(came_back, Ended)
    confirmed = judge(thread("notLoaded", "interrupted"), first.seen, 1.0, SETTINGS, turn_id=TURN)
    assert isinstance(confirmed, Lost)


def test_a_thread_the_host_cannot_be_asked_about_is_not_judged_and_keeps_its_time() -> None:
    """spec: ATT-6, ATT-24"""
    first = judge(thread("notLoaded"), Seen(), 0.0, SETTINGS, turn_id=TURN)
    assert isinstance(first, Wait)
    blind = judge(Unreadable("timed out"), first.seen, 5_000.0, SETTINGS, turn_id=TURN)
    assert (
        isinstance(blind, Wait) and blind.seen.since == 0.0 and blind.seen.look == (first.seen.look)
    )
    assert isinstance(twice(thread("notLoaded"), blind.seen, 5_000.0), Lost)
    recheck = Seen(first.seen.look, 0.0, recheck=True)
    blind_recheck = judge(Unreadable("timed out"), recheck, 5_000.0, SETTINGS, turn_id=TURN)
    assert isinstance(blind_recheck, Wait) and not blind_recheck.seen.recheck


def test_an_adopted_subagent_is_found_by_its_marker_or_lost_after_lost_after() -> None:
    """spec: ATT-23"""
    found = judge(thread("notLoaded"), Seen(), 0.0, SETTINGS, turn_id=None, marker=MARKER)
    assert found == Found(TURN)
    started = thread("idle").model_copy(deep=True)
    started.turns[0].startedAt = 1795982910
    assert judge(started, Seen(), 0.0, SETTINGS, turn_id=None, marker=MARKER) == Found(
        TURN, 1795982910
    )  # the adopted turn's turn_started records when the host started it
    missing = judge(Unknown(), Seen(), 0.0, SETTINGS, turn_id=None, marker=MARKER)
    assert isinstance(missing, Wait)
    late = judge(Unknown(), missing.seen, 600.0, SETTINGS, turn_id=None, marker=MARKER)
    assert isinstance(late, Wait) and late.seen.recheck
    assert judge(Unknown(), late.seen, 601.0, SETTINGS, turn_id=None, marker=MARKER) == Lost(
        "turn_unchanged", "unknown", "unknown", None
    )


def test_an_interrupt_on_a_live_thread_is_harvested_once_it_settles() -> None:
    """spec: ATT-2 (an interrupted turn on a live thread is the harvest's)"""
    first = judge(thread("idle", "interrupted"), Seen(), 0.0, SETTINGS, turn_id=TURN)
    assert isinstance(first, Wait) and first.until == SETTINGS.host_poll_interval
    settled = judge(thread("idle", "interrupted"), first.seen, 30.0, SETTINGS, turn_id=TURN)
    assert isinstance(settled, Ended)
    announced = Turn(id=TURN, status="interrupted")
    at_once = judge(
        thread("idle", "inProgress"), Seen(), 0.0, SETTINGS, turn_id=TURN, announced=announced
    )
    assert isinstance(at_once, Ended) and at_once.turn.status == "interrupted"


def test_an_interrupt_read_alone_settles_for_a_second_at_least_under_a_short_poll() -> None:
    """spec: ATT-2, HARV-1. codex shows a turn just started as interrupted, no error, on an
    idle thread for a moment: with a 10 ms poll interval that read is believed only
    after INTERRUPTED_SETTLE_MIN, and a turn that runs meanwhile is waited for."""
    short = Settings(lost_after=600.0, poll_interval=2.0, host_poll_interval=0.01)
    first = judge(thread("idle", "interrupted"), Seen(), 0.0, short, turn_id=TURN)
    assert isinstance(first, Wait) and first.until == INTERRUPTED_SETTLE_MIN
    early = judge(thread("idle", "interrupted"), first.seen, 0.5, short, turn_id=TURN)
    assert isinstance(early, Wait) and early.until == INTERRUPTED_SETTLE_MIN
    running = judge(thread("active", "inProgress"), early.seen, 0.6, short, turn_id=TURN)
    assert isinstance(running, Wait)
    settled = judge(thread("idle", "interrupted"), first.seen, 1.0, short, turn_id=TURN)
    assert isinstance(settled, Ended)


def step(k: int = 1, attempt: int = 1, **extra: Any) -> StepPublished:
    return StepPublished(
        call="build.1",
        k=k,
        attempt=attempt,
        marker=f"build.1/t{k}-a{attempt}",
        conversation_turn=k,
        **extra,
    )


def test_the_attempt_after_a_lost_one_runs_the_same_turn_again() -> None:
    """spec: STEP-24, ATT-10"""
    repair = step(2, 1, previous_answer="{}", repair_errors=["x"], call_tokens=Tokens(input=5))
    following = lost.after_lost("build.1", repair, max_attempts=3)
    assert following == lost.NextAttempt(
        k=2,
        attempt=2,
        conversation_turn=2,
        replaces_turn="build.1/t2-a1",
        previous_answer_in="build.1/t2-a1",
        repair_errors=["x"],
    )
    # A lost step that names the row holding its answer passes that name on.
    named = repair.model_copy(
        update={"previous_answer": None, "previous_answer_in": "build.1/t2-a0"}
    )
    again = lost.after_lost("build.1", named, max_attempts=3)
    assert isinstance(again, lost.NextAttempt) and again.previous_answer_in == "build.1/t2-a0"


def test_past_the_attempt_budget_the_call_is_held() -> None:
    """spec: ATT-8 (the gate's budget)"""
    held = lost.after_lost("build.1", step(1, 3), max_attempts=3)
    assert isinstance(held, Held) and held.reason == "attempts_exhausted"
    assert isinstance(lost.after_lost("build.1", step(1, 1), max_attempts=1), Held)


def test_a_clock_at_the_lost_after_deadline_reads_it_as_due() -> None:
    """spec: ATT-4 (a clock that jumps to the deadline the rule asked for finds the
    attempt due, though since + LostAfter - since falls a hair short in floats)"""
    since = 50.123456789
    settings = Settings(lost_after=90.0, host_poll_interval=600.0)
    assert (since + 90.0) - since < 90.0
    first = judge(Unknown(), Seen(), since, settings, turn_id=TURN)
    assert isinstance(first, Wait) and first.until == since + 90.0
    due = judge(Unknown(), first.seen, first.until, settings, turn_id=TURN)
    assert isinstance(due, Wait) and due.seen.recheck
