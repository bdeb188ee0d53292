"""A session subagent whose model the host cannot reach (spec: HARV-14).

The simulated subagent's marker turn (`unreachable`) retries its model as codex
0.163.0 does when the endpoint refuses connections: `error {willRetry: true}` on
the subagent's thread at 0, 5, 15, 35 s ... after it starts, never ending, with
no model response. Once the host has retried it for `unreachable_after` (60 s by
default) the run interrupts the turn, its interrupt_requested row durable first,
and holds the call host_failure with what the host said; answered retry, the
call goes on with a new attempt. The harness of `test_session_run` (the simulated
host, a scripted owner, one MockClock); each test asserts the rows written.
"""

from __future__ import annotations

from pathlib import Path

from trio.testing import MockClock

from crw.engine.holds import interrupt
from crw.journal.log import read_journal
from crw.settings import DEFAULT_SETTINGS
from tests.actors.test_held_in_place import answer
from tests.actors.test_session_interrupt import TurnAtCommit, go, host_turn, last
from tests.actors.test_session_resume import KillPoint
from tests.actors.test_session_run import harness, kinds

CALL = "build.1"
BOUND = ["prepared", "step_published", "thread_started", "turn_started"]
ERROR = (
    "the model cannot be reached: the host said Reconnecting... waiting for network "
    "(Connection failed: error sending request) [responseStreamDisconnected], "
    "4 retries over 60 s; check the model provider's base_url and the network, "
    "then answer retry"
)


async def test_a_subagent_turn_the_host_only_retries_is_interrupted_and_held_host_failure(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: HARV-14, HARV-31, HARV-35, ROWS-6: the subagent's turn retries from
    1 s after it starts (its `seconds`), at 1, 6, 16 and 36 s; at 61 s the run
    writes interrupt_requested (reason host_failure, the host's words) while the
    turn is still in progress, interrupts it, and holds the call with that error."""
    async with harness(tmp_path) as h:
        await h.script({"marker": f"{CALL}/t1-a1"}, unreachable=True)
        at_commit = TurnAtCommit(h)
        state, rows = await go(h, after_commit=at_commit.after_commit)
        turn_id = last(rows, "turn_started")["turn_id"]
        started = host_turn(h, turn_id).started_clock
        status = host_turn(h, turn_id).status
    assert state == "waiting_decision"
    assert kinds(rows, CALL) == [*BOUND, "interrupt_requested", "held"]
    asked = last(rows, "interrupt_requested")
    assert (asked["reason"], asked["op"], asked["attempt"], asked["turn_id"]) == (
        "host_failure",
        f"{CALL}/t1",
        1,
        turn_id,
    )
    assert asked["error"] == ERROR
    assert at_commit.seen == ["inProgress"]  # the intent is durable before the interrupt
    assert status == "interrupted"
    held = last(rows, "held")
    assert (held["reason"], held["error"]) == ("host_failure", ERROR)
    assert kinds(rows, "review.1") == []
    # Bounded: given up at the first poll unreachable_after past the first retry,
    # not at LostAfter. Timed at the intent's commit, not when the run stopped. The
    # clock takes no virtual time for a worker thread's work (tests/mock_clock.py),
    # so the figure is the same on a loaded machine.
    given_up = 1 + DEFAULT_SETTINGS.unreachable_after
    (decided,) = at_commit.at
    waited = round(decided - started, 6)  # the mock clock's sums of tenths
    assert given_up <= waited < given_up + DEFAULT_SETTINGS.poll_interval


async def test_a_held_unreachable_call_answered_retry_goes_on_with_a_new_attempt(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: HARV-14, ATT-30, ATT-32: once the model is reachable again, retry
    spawns attempt 2, which completes, and the run goes on to its end."""
    async with harness(tmp_path) as h:
        await h.script({"marker": f"{CALL}/t1-a1"}, unreachable=True)
        state, held = await go(h)
        assert state == "waiting_decision"
        answer(h.run, "retry")
        state, rows = await go(h)
    assert kinds(rows[len(held) :], CALL) == [
        "decision",
        "step_published",
        "thread_started",
        "turn_started",
        "completed",
    ]
    decision = last(rows, "decision")
    assert (decision["choice"], decision["reason"]) == ("retry", "host_failure")
    assert last(rows, "step_published")["attempt"] == 2
    assert state == "ended"


async def test_a_resumed_process_holds_the_call_with_the_hosts_words_its_intent_recorded(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: HARV-14, HARV-37, HARV-38: the process dies once interrupt_requested is
    durable; the resumed one applies the intent and holds the call with the error
    the row recorded, not the reason's bare name."""
    async with harness(tmp_path) as h:
        await h.script({"marker": f"{CALL}/t1-a1"}, unreachable=True)
        kill = KillPoint("interrupt_requested", CALL)
        with kill.scope:
            await go(h, after_commit=kill.after_commit)
        assert kill.scope.cancelled_caught
        dead = read_journal(h.run.journal).rows
        state, rows = await go(h)
    assert kinds(rows[len(dead) :], CALL) == ["held"]
    held = last(rows, "held")
    assert (held["reason"], held["error"]) == ("host_failure", ERROR)
    assert kinds(rows, CALL).count("interrupt_requested") == 1
    assert state == "waiting_decision"


def test_an_intent_carries_the_held_rows_words() -> None:
    """The pure part: the intent a resumed process reads keeps the error; a reason
    with no words of its own and no error is held with its name."""
    from crw.journal.rows import StepPublished

    step = StepPublished(call=CALL, k=1, op=f"{CALL}/t1", attempt=1)
    row = interrupt.requested("host_failure", step, "turn-1", ERROR).model_dump()
    found = interrupt.intent([row])
    assert found is not None and (found.reason, found.error) == ("host_failure", ERROR)
    assert interrupt.held(CALL, "host_failure").error == "host_failure"
