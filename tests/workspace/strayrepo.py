"""Test helpers of the stray-ref tests: a tmp repository and an executor's
attempt worktree made with pygit2, as the placer makes one."""

from __future__ import annotations

from pathlib import Path

import pygit2

SIG = pygit2.Signature("test", "test@example.invalid", 1_700_000_000, 0)


def repo_with(path: Path, files: dict[str, str]) -> pygit2.Repository:
    """A repository at `path` with one commit on main holding `files`."""
    repo = pygit2.init_repository(str(path), initial_head="main")
    commit_files(repo, path, files, "initial")
    return repo


def commit_files(
    repo: pygit2.Repository, workdir: Path, files: dict[str, str], message: str
) -> str:
    """Write `files` under `workdir`, add them and commit on HEAD; the new commit."""
    for name, text in files.items():
        target = workdir / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    index = repo.index
    index.add_all()
    index.write()
    tree = index.write_tree()
    parents = [] if repo.head_is_unborn else [repo.head.target]
    return str(repo.create_commit("HEAD", SIG, SIG, message, tree, parents))


def attempt_worktree(repo: pygit2.Repository, path: Path, name: str, start: str) -> Path:
    """An attempt worktree on branch `name` at `start`, as the placer makes it."""
    branch = repo.branches.local.create(name, repo[start])  # type: ignore[arg-type]
    repo.add_worktree(name, str(path), branch)
    return path
