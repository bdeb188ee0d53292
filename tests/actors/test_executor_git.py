"""An executor's harvest on git, between the harvest decision and its rows."""

from __future__ import annotations

from pathlib import Path

import pygit2

from crw.actors import executor_git
from crw.journal.rows import Allocation, Completed, NullModel, RowModel
from crw.workspace import refs
from crw.workspace.placer import Placer
from tests.workspace.gitrepo import attempt_worktree, make_repo

NOW = "2026-01-01T00:00:00.000000Z"


def _worktree(tmp_path: Path) -> tuple[pygit2.Repository, Allocation]:
    repo = make_repo(tmp_path / "repo", {"a.txt": "a\n"})
    start = str(repo.head.target)
    wt = attempt_worktree(repo, tmp_path / "wt", "crw-r1-build.1", start)
    return repo, Allocation(workspace=str(wt), kind="worktree", start_commit=start)


async def _prepare(
    end: RowModel, allocation: Allocation, repository: str | None, read: list[str] | None = None
) -> executor_git.Effects:
    def clock() -> str:
        if read is not None:
            read.append(NOW)
        return NOW

    prepared = {
        "row": "prepared",
        "call": "build.1",
        "node": "build",
        "allocation": allocation.model_dump(),
    }
    return await executor_git.prepare(
        end,
        allocation,
        Placer("r1", repository, allocation.start_commit, Path("calls")),
        executor_git.keep([prepared]),
        node="build",
        call="build.1",
        attempt=1,
        clock=clock,
    )


async def test_only_a_completed_executor_on_git_is_read(tmp_path: Path) -> None:
    """spec: GEN-7: the wall clock that stamps the harvest's commit is read for
    that harvest alone, not at the end of every call."""
    repo, allocation = _worktree(tmp_path)
    done = Completed(call="build.1")
    checkout = allocation.model_copy(update={"kind": "checkout"})
    read: list[str] = []
    for end, alloc, where in (
        (NullModel(call="build.1"), allocation, repo.path),
        (done, checkout, repo.path),
        (done, allocation, None),
    ):
        effects = await _prepare(end, alloc, where, read)
        assert effects == executor_git.NONE and read == []
        assert effects.rows(end) == [end]
        assert await executor_git.apply(effects, "build.1") is None
    effects = await _prepare(done, allocation, repo.path, read)
    assert read == [NOW]
    completed, made = effects.rows(done)
    assert completed.pending_tree == made.tree  # type: ignore[attr-defined]
    assert await executor_git.apply(effects, "build.1") is None
    assert refs.read(repo, "refs/crw/flow/r1/nodes/build") == made.commit  # type: ignore[attr-defined]


async def test_a_worktree_that_cannot_be_read_holds_the_call(tmp_path: Path) -> None:
    """spec: GEN-7"""
    repo, allocation = _worktree(tmp_path)
    (Path(str(allocation.workspace)) / ".git").unlink()  # P is no git worktree any more
    done = Completed(call="build.1")
    effects = await _prepare(done, allocation, repo.path)
    assert effects.rows(done) == [done]
    held = await executor_git.apply(effects, "build.1")
    assert held is not None and (held.call, held.reason) == ("build.1", "worktree_unreadable")
    assert str(allocation.workspace) in (held.error or "")
    assert "\n" not in (held.error or "")
