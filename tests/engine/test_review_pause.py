"""A review round's calls as the round reads them: a pause's hold does not end a
call (the resumed run takes it in place), every other terminal row does."""

from __future__ import annotations

from typing import Any

from crw.engine import review
from crw.engine.workflow import Review

DONE: dict[str, Any] = {"row": "completed", "result": {"summary": "x"}}
REJECTED: dict[str, Any] = {"row": "completed", "result": {"verdict": "reject", "findings": ["f"]}}


def test_a_fix_call_held_by_a_pause_is_run_again_in_place() -> None:
    """spec: ATT-30 (a call the pause held goes on in place), ATT-37"""
    paused: dict[str, Any] = {"row": "held", "reason": "paused"}
    by_call = {"b.1": [DONE], "b.2": [REJECTED], "b.3": [paused]}
    ends = review.ends_of("b", by_call)
    assert ends == [DONE, REJECTED]
    action = review.next_action(Review(role="reviewer", rounds=1), ends)
    assert action == review.RunCall(3, "fix", handle=1, findings=("f",))


def test_a_fix_call_held_for_another_reason_ends_the_node() -> None:
    """spec: ATT-37: a hold other than a pause's is the node's end"""
    held: dict[str, Any] = {"row": "held", "reason": "deadline"}
    by_call = {"b.1": [DONE], "b.2": [REJECTED], "b.3": [held]}
    ends = review.ends_of("b", by_call)
    assert review.next_action(Review(role="reviewer", rounds=1), ends) == review.Finish(held)
