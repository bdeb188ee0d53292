"""A review round's calls as the round reads them: a pause's hold does not end a
call (the resumed run takes it in place), every other terminal row does."""

from __future__ import annotations

import builtins
from typing import Any

import pytest

from crw.engine.calls import review
from crw.engine.config.workflow_nodes import Review

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


def test_the_ends_of_a_node_import_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """The gate asks `ends_of` once a node a round: it runs no import statement
    (what it needs is imported with the module, without the interrupt rules)."""
    imports: list[str] = []
    real = builtins.__import__

    def counting(name: str, *args: Any, **kwargs: Any) -> Any:
        imports.append(name)
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", counting)
    paused: dict[str, Any] = {"row": "held", "reason": "paused"}
    for node in range(100):
        review.ends_of(f"n{node}", {f"n{node}.1": [DONE], f"n{node}.2": [paused]})
    assert imports == []
