"""`crw.engine.views.shadow` on session runs with lost attempts, run end to end on the
simulated host: what follows a lost attempt is decided again by `lost.after_lost`."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from trio.testing import MockClock

from crw.engine.answers.outcome import read_rollout_total
from crw.engine.config.workflow import load_workflow
from crw.engine.views.shadow import Report, shadow
from tests.actors.test_session_lost import CALL, lost_owner
from tests.actors.test_session_run import harness

Rows = list[dict[str, Any]]


def _shadow(tmp_path: Path, rows: Rows, max_attempts: int) -> Report:
    workflow = load_workflow(tmp_path / "wf.toml")
    return shadow(
        rows, workflow, workflow.pool, max_attempts, lambda p: read_rollout_total(Path(p))
    )


def _points(report: Report) -> list[tuple[str | None, str, str, str]]:
    return [(p.call, p.check, p.recorded, p.replayed) for p in report.points]


async def test_the_attempt_after_a_lost_one_replays_equal_and_an_edited_one_is_caught(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: GEN-13"""
    async with harness(tmp_path) as h:
        lost_owner(h)
        await h.script({"marker": f"{CALL}/t1-a1"}, vanish="notLoaded")
        _, rows = await h.go()
    report = _shadow(tmp_path, rows, 3)
    assert report.points == [] and report.checked["lost"] == 1
    assert report.backend == "app-server"  # the harness writes no started row (GEN-10)
    second = [r for r in rows if r["row"] == "step_published" and r["call"] == CALL][1]
    second["attempt"] = 3
    assert _points(_shadow(tmp_path, rows, 3)) == [
        (CALL, "lost", "attempt 3", "attempt 2"),
        (CALL, "turn", "turn_started k 1 attempt 2", _no_step()),
        (CALL, "harvest", "attempt 2", "attempt 3"),
    ]


def _no_step() -> str:
    return "no step_published row of that k and attempt precedes it: no turn to start"


async def test_a_call_past_its_attempt_budget_replays_held_and_an_edited_reason_is_caught(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: GEN-13"""
    async with harness(tmp_path) as h:
        h.settings = replace(h.settings, max_attempts=2)
        lost_owner(h)
        await h.script({"marker": f"{CALL}/*"}, vanish="notLoaded")
        _, rows = await h.go()
    assert _shadow(tmp_path, rows, 2).points == []
    held = next(r for r in rows if r["row"] == "held" and r["call"] == CALL)
    held["reason"] = "host_failure"
    assert _points(_shadow(tmp_path, rows, 2)) == [
        (CALL, "lost", 'reason "host_failure"', 'reason "attempts_exhausted"')
    ]
