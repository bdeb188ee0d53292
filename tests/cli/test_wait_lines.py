"""`crw flow wait`'s piped progress lines (`crw.cli.read.wait._Plain`): a line each
time the run's state, its counts or whether a process holds it change; never for a
session run going between running and waiting_session alone."""

from __future__ import annotations

from typing import Any

import pytest

from crw.cli.read.wait import _Plain

TOKENS = {"input": 0, "cached_input": 0, "output": 0, "reasoning_output": 0, "total": 7}


def payload(state: str, done: int, flight: int = 1) -> dict[str, Any]:
    return {
        "run": "r-1",
        "state": state,
        "done": done,
        "total": 3,
        "in_flight": [{"call": f"c.{n}"} for n in range(flight)],
        "tokens": TOKENS,
    }


def test_a_line_for_each_change_none_for_a_step_s_state_flip(
    capsys: pytest.CaptureFixture[str],
) -> None:
    shown = _Plain(" --state S")
    shown(payload("running", 0), True)
    shown(payload("waiting_session", 0), True)  # a step published: no line
    shown(payload("running", 0), True)  # bound: no line
    shown(payload("running", 1, 0), True)
    shown(payload("running", 1, 0), False)  # its process died
    shown(payload("paused", 1, 0), False)
    assert capsys.readouterr().out.splitlines() == [
        "-- run r-1 running: 0/3 calls done, 1 in flight, tokens 7",
        "-- run r-1 running: 1/3 calls done, 0 in flight, tokens 7",
        "-- run r-1 running: 1/3 calls done, 0 in flight, tokens 7; no process runs it: "
        "waiting until it is resumed (crw flow resume r-1 --detach --state S)",
        "-- run r-1 paused: 1/3 calls done, 0 in flight, tokens 7",
    ]
