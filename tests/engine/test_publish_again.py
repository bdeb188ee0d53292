"""The row a session call's step written again is committed with, pure (spec:
ATT-21, ATT-35, STEP-21, HARV-24): none while the newest step_published row is
still its intent, the same step again once a hold ended that row."""

from __future__ import annotations

from typing import Any

from crw.engine.calls.session_progress import publish_again
from tests.engine.test_interrupt import CALL, PREPARED, step, thread, turn

TOKENS = {"input": 10, "output": 2, "total": 12}


def published(**extra: Any) -> dict[str, Any]:
    """The step_published row as the journal reads it back: seq, at, call_tokens."""
    return step(seq=3, at="2026-12-06T11:00:00Z", call_tokens=TOKENS, conversation_turn=1) | extra


def held(reason: str = "paused") -> dict[str, Any]:
    return {"row": "held", "call": CALL, "reason": reason, "tokens": TOKENS}


def test_a_step_whose_row_stands_is_written_again_with_no_row() -> None:
    """Last row step_published (a process died waiting for the bind): that row is
    the intent of the files the resumed process writes (ATT-21)."""
    assert publish_again([PREPARED, published()]) is None
    assert publish_again([PREPARED, published(), {"row": "session_host_warning"}]) is None


def test_a_step_a_pause_held_is_published_again_with_its_row() -> None:
    """A pause held the call with its step unbound (the step file retracted): the
    step written again after the look-up is the same step, its row anew, without
    the journal's seq and at and without the call_tokens the held row counted."""
    again = publish_again([PREPARED, published(), held(), {"row": "started"}])
    assert again is not None
    assert again.model_dump(exclude_none=True) == {
        "row": "step_published",
        "call": CALL,
        "k": 1,
        "attempt": 1,
        "op": f"{CALL}/t1",
        "marker": f"{CALL}/t1-a1",
        "action": "spawn",
        "conversation_turn": 1,
    }


def test_a_step_of_a_hold_answered_retry_is_published_again_with_its_row() -> None:
    """Any hold ends the row's intent: a deadline's answered retry too."""
    rows = [PREPARED, published(), held("deadline"), {"row": "decision", "call": CALL}]
    rows[-1]["choice"] = "retry"
    again = publish_again(rows)
    assert again is not None and (again.marker, again.call_tokens) == (f"{CALL}/t1-a1", None)


def test_a_bound_step_or_none_is_not_written_again() -> None:
    """A step whose turn was bound is never written again; a call held before its
    first step publishes that step as a new one, not this way."""
    assert publish_again([PREPARED, published(), thread(), turn("t-1"), held()]) is None
    assert publish_again([PREPARED, held()]) is None
    assert publish_again([]) is None
