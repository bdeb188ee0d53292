"""A run whose schema cannot be checked in time ends that call null_model and goes
on; it never spins on the answer, and answers a pause while it checks
(app-server backend on the simulated host)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from trio.testing import MockClock

from crw.bus import control as requests
from crw.engine.answers import schema_check
from crw.engine.answers.schema_check import CHECK_SECONDS
from crw.engine.run.rundir import RunDir
from tests.actors.test_app_server_interrupt import go
from tests.actors.test_app_server_run import harness, kinds, terminal

EVIL = """
name = "evil"
pool = 1

[[node]]
id = "explore"
role = "explorer"
task = "Name it."
schema = { type = "object", required = ["name"], properties = { name = { pattern = "^(a|a)*$" } } }
"""


@pytest.fixture
def autojump_clock() -> MockClock:
    """pytest-trio's own autojumping clock, not the suite's (tests/mock_clock.py):
    here a worker thread checks for a second or more on purpose, and the run's
    timers must go on meanwhile, as they do on a real clock."""
    return MockClock(autojump_threshold=0)


async def test_answer_that_cannot_be_checked_in_time_ends_the_call_null_model(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    began = time.process_time()
    async with harness(tmp_path, EVIL) as h:
        await h.script({"marker": "explore.1/*"}, answer={"name": "a" * 30 + "!"})
        state, rows = await h.run()
    # CPU, not wall time (which grows with the machine's load): about 1 s, the
    # check's budget once; a run that spun on the answer would burn on.
    assert time.process_time() - began < 5.0
    assert kinds(rows, "explore.1") == [
        "prepared",
        "step_published",
        "thread_started",
        "turn_started",
        "null_model",
    ]
    end = terminal(rows, "explore.1")
    assert end["reason"] == "schema_check_timed_out"
    assert end["errors"] == ["$: matching the pattern '^(a|a)*$' took longer than 1 s"]
    assert state == "ended" and rows[-1]["row"] == "ended" and rows[-1]["status"] == "failed"


UNIQUE = """
name = "unique"
pool = 2

[[node]]
id = "big"
role = "explorer"
task = "List them."
schema.type = "object"
schema.required = ["items"]
schema.properties.items = { type = "array", uniqueItems = true }

[[node]]
id = "slow"
role = "explorer"
task = "Take your time."
schema = { type = "object" }
"""
MANY = {"items": [{"id": i, "name": f"n{i}"} for i in range(6000)]}
"""6,000 small objects: checking that no two are equal takes minutes."""


def paused_while_checking(rows: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The rows of UNIQUE paused while the run checked MANY: big.1 ended null_model
    (its check timed out) and slow.1 held paused. Returns their two rows."""
    end = terminal(rows, "big.1")
    assert (end["row"], end["reason"], end["errors"]) == (
        "null_model",
        "schema_check_timed_out",
        [f"$: checking the answer against its schema took longer than {CHECK_SECONDS:g} s"],
    )
    held = terminal(rows, "slow.1")
    assert (held["row"], held["reason"]) == ("held", "paused")
    return end, held


def _pause_when_checked(monkeypatch: pytest.MonkeyPatch, run: RunDir) -> None:
    """Ask the run to pause (as `crw flow pause` does) when the check of MANY begins."""
    errors = schema_check._errors
    asked: list[bool] = []

    def checking(result: Any, schema: Any) -> list[str]:
        if result == MANY and not asked:
            asked.append(True)
            requests.write_request(run, requests.Request.new(run.id, "pause", "t"))
        return errors(result, schema)

    monkeypatch.setattr(schema_check, "_errors", checking)


async def test_a_check_that_runs_long_ends_null_model_while_the_run_answers_a_pause(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, autojump_clock: MockClock
) -> None:
    """spec: HARV-6 (the answer checked within its bound), HARV-28 (a pause reaches
    every call in flight)"""
    async with harness(tmp_path, UNIQUE) as h:
        await h.script({"marker": "big.1/*"}, answer=MANY)
        await h.script({"marker": "slow.1/*"}, hang=True)
        _pause_when_checked(monkeypatch, RunDir(h.run_dir))
        state, rows = await go(h)
    end, held = paused_while_checking(rows)
    # The run stopped the other call while the check ran, not after it.
    assert held["seq"] < end["seq"]
    assert state == "paused" and rows[-1]["row"] == "paused"
