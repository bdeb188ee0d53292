"""The decisions a run's page offers are what the command line offers in the
run's state, and each runs as the command a user types (pure)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from crw.web.decide import Action, argv, offered
from crw.web.guard import Guard

HELD = [{"call": "build.1", "answer": {"retry": "…", "skip": "…", "abort": "…", "restart": "…"}}]


def status(state: str, *, live: bool = False, launch_failed: object = None) -> dict[str, Any]:
    return {"state": state, "live": live, "launch_failed": launch_failed}


@pytest.mark.parametrize(
    ("given", "held", "verbs"),
    [
        (status("running", live=True), [], ["pause", "cancel"]),
        (status("waiting_session", live=True), [], ["pause", "cancel"]),
        (status("paused"), [], ["resume", "cancel"]),
        (status("crashed"), [], ["resume", "cancel"]),
        (status("waiting_decision"), HELD,
         ["retry build.1", "skip build.1", "abort build.1", "restart build.1", "cancel"]),
        (status("waiting_decision", launch_failed={"pid": 1}), HELD,
         ["retry build.1", "skip build.1", "abort build.1", "restart build.1", "resume",
          "cancel"]),
        (status("ended"), [], []),
        (status("corrupt"), [], []),
    ],
)  # fmt: skip
def test_the_decisions_offered_follow_the_runs_state(
    given: dict[str, Any], held: list[dict[str, Any]], verbs: list[str]
) -> None:
    assert [action.label for action in offered(given, held)] == verbs


def test_each_decision_runs_the_command_a_user_types() -> None:
    state = Path("/s t")
    answer = argv(Action("answer", "build.1", "retry"), "r", state)
    assert answer == ["crw", "flow", "answer", "r", "build.1", "--retry",
                      "--state", "/s t", "--json"]  # fmt: skip
    assert argv(Action("resume"), "r", state)[2:5] == ["resume", "r", "--detach"]
    assert argv(Action("pause"), "r", state) == [
        "crw", "flow", "pause", "r", "--state", "/s t", "--json"]  # fmt: skip


def test_a_server_on_another_address_still_answers_its_loopback_names() -> None:
    guard = Guard()
    guard.bound("0.0.0.0", 8000)
    assert guard.refuses_read("127.0.0.1", "127.0.0.1:8000") is None
    assert guard.refuses_read("127.0.0.1", "evil.example:8000") is not None
    assert guard.refuses_read("192.0.2.7", "0.0.0.0:8000") is not None
