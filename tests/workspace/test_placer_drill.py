"""The placer in real processes: a session run started from a git checkout (its state
directory `.crw/` at the checkout's root), played by the process-level owner on a
simulated host, killed right after a prepared row and resumed."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pygit2
import pytest

from crw.engine.run.locks import run_is_live
from tests.drill.test_crash_drill import Drill, drill_at, killed_and_resumed, served, wait_until
from tests.workspace.gitrepo import make_repo


@pytest.fixture
def drill(tmp_path: Path) -> Iterator[tuple[Drill, pygit2.Repository]]:
    repo = make_repo(tmp_path / "project", {"main.py": "print('hi')\n"})
    made = drill_at(Drill, tmp_path, state=tmp_path / "project" / ".crw")
    made.run_deadline = 60.0  # a loaded machine: the run itself takes ~5 s
    with served(made):
        yield made, repo


def ended(drill: Drill) -> None:
    """Wait for the run process to let the run go (it releases after its ended row)."""
    assert drill.run is not None
    run = drill.run
    wait_until("the run process lets the run go", lambda: not run_is_live(run))


def check_placed_and_released(rows: list[dict[str, Any]], repo: pygit2.Repository) -> None:
    assert rows[-1]["row"] == "ended" and rows[-1]["status"] == "completed"
    prepared = {r["call"]: r["allocation"] for r in rows if r["row"] == "prepared"}
    head = str(repo.head.target)
    assert {call: a["kind"] for call, a in prepared.items()} == {
        "explore.1": "checkout",
        "build.1": "worktree",
        "review.1": "checkout",
    }
    assert {a["start_commit"] for a in prepared.values()} == {head}
    run_id = Path(prepared["build.1"]["workspace"]).parents[1].name
    assert prepared["build.1"]["branch"] == f"refs/heads/crw/{run_id}/build.1"
    for call, allocation in prepared.items():
        step = next(r for r in rows if r["row"] == "step_published" and r["call"] == call)
        assert step["workspace"] == allocation["workspace"]
        assert not Path(allocation["workspace"]).exists(), f"{call}'s P was not released"
    assert repo.list_worktrees() == []
    assert [n for n in repo.references if n.startswith("refs/heads/crw/")] == []


def test_a_run_started_in_a_checkout_works_in_worktrees_released_at_its_end(
    drill: tuple[Drill, pygit2.Repository],
) -> None:
    """spec: STEP-1, STEP-3, STEP-4, ATT-15"""
    run, repo = drill
    run.start(crash_after=None)
    rows = run.finish()
    ended(run)
    check_placed_and_released(rows, repo)


def test_a_run_killed_right_after_a_prepared_row_makes_p_when_resumed(
    drill: tuple[Drill, pygit2.Repository],
) -> None:
    """The prepared row is durable, its P not made yet: the resumed process makes
    it and the run ends as an undisturbed one.

    spec: STEP-2, ATT-15"""
    run, repo = drill
    rows = killed_and_resumed(run, "step_published@build.1")
    ended(run)
    check_placed_and_released(rows, repo)
    assert [r["row"] for r in rows if r.get("call") == "build.1"].count("prepared") == 1
