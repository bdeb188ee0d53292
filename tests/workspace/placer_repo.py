"""A small git repository in a tmp dir, made with pygit2 (the placer's tests)."""

from __future__ import annotations

from pathlib import Path

import pygit2

SIGNATURE = pygit2.Signature("crw test", "crw@example.invalid", 1_700_000_000, 0)


def new_repo(path: Path, files: dict[str, str] | None = None) -> pygit2.Repository:
    """A repository at `path` with one commit of `files` on its HEAD branch."""
    repo = pygit2.init_repository(str(path), initial_head="main")
    commit(repo, files or {"README.md": "hello\n"}, "first")
    return repo


def commit(repo: pygit2.Repository, files: dict[str, str], message: str) -> str:
    """Write `files` in the work tree and commit them on HEAD; the commit's hex."""
    workdir = Path(str(repo.workdir))
    for name, text in files.items():
        (workdir / name).parent.mkdir(parents=True, exist_ok=True)
        (workdir / name).write_text(text)
        repo.index.add(name)
    repo.index.write()
    tree = repo.index.write_tree()
    parents = [] if repo.head_is_unborn else [repo.head.target]
    return str(repo.create_commit("HEAD", SIGNATURE, SIGNATURE, message, tree, parents))
