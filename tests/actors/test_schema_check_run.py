"""A run whose schema cannot be checked in time ends that call null_model and goes
on; it never spins on the answer (app-server backend on the simulated host)."""

from __future__ import annotations

import time
from pathlib import Path

from trio.testing import MockClock

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


async def test_answer_that_cannot_be_checked_in_time_ends_the_call_null_model(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    began = time.monotonic()
    async with harness(tmp_path, EVIL) as h:
        await h.script({"marker": "explore.1/*"}, answer={"name": "a" * 30 + "!"})
        state, rows = await h.run()
    assert time.monotonic() - began < 5.0
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
