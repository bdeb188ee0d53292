"""What making and releasing a call's worktree costs as a run's worktrees grow."""

from __future__ import annotations

import shutil
from pathlib import Path

import pygit2
import pytest

from crw.workspace.placer import Placer
from tests.workspace.gitrepo import make_repo

RUN = "wf-run-1"


def test_making_and_releasing_a_worktree_lists_no_other_worktree(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cost docs/performance.md names, which no requirement does: a run on git
    holds a worktree a call until it ends, so a make or a release that listed the
    repository's worktrees (libgit2 reads every one's files) cost O(live worktrees)
    each: O(calls^2) in all. Each looks up its own worktree's record alone; a stale
    record (its directory gone) is still pruned and the worktree made again."""
    repo = make_repo(tmp_path / "repo", {"a.txt": "a\n"})
    placer = Placer(
        RUN, str(Path(str(repo.workdir)).resolve()), str(repo.head.target), tmp_path / "calls"
    )
    allocations = [placer.allocate(f"n{i}.1", f"n{i}", "explorer", None) for i in range(3)]
    placer.make(allocations[0], "n0")

    def listed(self: pygit2.Repository) -> list[str]:
        raise AssertionError("the repository's worktrees were listed")

    monkeypatch.setattr(pygit2.Repository, "list_worktrees", listed)
    for i, allocation in enumerate(allocations[1:], 1):
        placer.make(allocation, f"n{i}")
    stale = Path(str(allocations[1].workspace))
    shutil.rmtree(stale)  # its directory gone, its record left: pruned, then made again
    placer.make(allocations[1], "n1")
    assert (stale / "a.txt").read_text() == "a\n"
    for i, allocation in enumerate(allocations):
        placer.release(allocation, f"n{i}")
    monkeypatch.undo()
    assert repo.list_worktrees() == []
