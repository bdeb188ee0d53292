"""A long schema check never freezes a real run: while the run's process checks
an answer of 6,000 objects against `uniqueItems` (every pair compared), `crw
flow pause RUN --wait 10` answers within its wait. Real processes: a `crw host
sim serve` host, a session run's process and its owner (`tests.drill.owner`),
all reaped by pid at teardown (the drill's `reap`)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.actors.test_schema_check_run import MANY, UNIQUE, paused_while_checking
from tests.drill.test_crash_drill import Drill, drill_at, served, wait_until

WAIT = 10


@pytest.fixture
def drill(tmp_path: Path) -> Iterator[Drill]:
    made = drill_at(Drill, tmp_path)
    made.workflow.write_text(UNIQUE)
    with served(made):
        made.host("sim/script", {"match": {"marker": "big.1/*"}, "behaviour": {"answer": MANY}})
        made.host("sim/script", {"match": {"marker": "slow.1/*"}, "behaviour": {"hang": True}})
        yield made


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
    # Answered within its wait: a pause that waits WAIT s for no answer exits 1
    # ("did not answer the pause within"). Its wall time is not asserted: it adds
    # the command's own start, seconds on a loaded machine.
    paused = drill.crw("flow", "pause", run, "--state", state, "--wait", str(WAIT), "--json")
    assert paused.code == 0, paused.stderr
    assert paused.json()["state"] == "paused"
    paused_while_checking(drill.rows())
