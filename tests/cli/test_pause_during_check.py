"""A long schema check never freezes a real run: while the run's process checks
an answer of 6,000 objects against `uniqueItems` (every pair compared), `crw
flow pause RUN --wait 10` answers within its wait. Real processes: a `crw host
sim serve` host, a session run's process and its owner (`tests.drill.owner`),
all reaped by pid at teardown (the drill's `reap`)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from crw.engine.schema_check import CHECK_SECONDS
from tests.cli.conftest import Crw
from tests.drill.test_crash_drill import Drill, wait_until

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
WAIT = 10


@pytest.fixture
def drill(tmp_path: Path) -> Iterator[Drill]:
    (tmp_path / "tmp").mkdir()
    made = Drill(tmp_path, Crw(tmp_path / "state", tmp_path / "tmp"))
    made.workflow.write_text(UNIQUE)
    try:
        made.serve()
        made.host("sim/script", {"match": {"marker": "big.1/*"}, "behaviour": {"answer": MANY}})
        made.host("sim/script", {"match": {"marker": "slow.1/*"}, "behaviour": {"hang": True}})
        yield made
    finally:
        made.reap()


def _terminal(rows: list[dict[str, Any]], call: str) -> dict[str, Any]:
    return next(
        r for r in rows if r.get("call") == call and r["row"] in {"completed", "null_model", "held"}
    )


def test_pause_answers_within_its_wait_while_the_run_checks_a_long_answer(drill: Drill) -> None:
    """spec: HARV-6 (the answer checked within its bound), HARV-28 (pause)"""
    drill.start(crash_after=None)
    assert drill.run is not None
    run, state = drill.run.id, str(drill.crw.state)

    def big_answered() -> bool:
        threads = [r["thread_id"] for r in drill.rows() if r["row"] == "thread_started"]
        started = [r for r in drill.rows() if r["row"] == "thread_started" and r["call"] == "big.1"]
        if not started or len(threads) < 2:
            return False
        _, status = drill.subagent_turns()
        return status.get(started[-1]["thread_id"]) not in {None, "active"}

    wait_until("big's turn ended on the host (its check begins)", big_answered)
    began = time.monotonic()
    paused = drill.crw("flow", "pause", run, "--state", state, "--wait", str(WAIT), "--json")
    took = time.monotonic() - began
    assert paused.code == 0, paused.stderr
    assert paused.json()["state"] == "paused" and took < WAIT
    rows = drill.rows()
    end = _terminal(rows, "big.1")
    assert (end["row"], end["reason"], end["errors"]) == (
        "null_model",
        "schema_check_timed_out",
        [f"$: checking the answer against its schema took longer than {CHECK_SECONDS:g} s"],
    )
    held = _terminal(rows, "slow.1")
    assert (held["row"], held["reason"]) == ("held", "paused")
