"""Test helpers: real git repositories in tmp dirs, and the attempt worktrees the
placer adds to them, made and read with pygit2 only (no `git` process, no network).
No test here."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pygit2

AUTHOR = pygit2.Signature("crw test", "test@crw.invalid", 1_700_000_000, 0)
"""The author and committer of the helpers' commits (a fixed time: stable ids)."""

_IGNORED = pygit2.enums.FileStatus.IGNORED


def make_repo(
    path: Path, files: Mapping[str, str] | None = None, *, branch: str = "main"
) -> pygit2.Repository:
    """A new repository at `path` (made if missing) on `branch`, with one commit
    of `files` ({relative path: text}; none: a README.md)."""
    path.mkdir(parents=True, exist_ok=True)
    repo = pygit2.init_repository(str(path), initial_head=branch)
    commit_files(path, files if files is not None else {"README.md": "# sample\n"}, "initial")
    return repo


def commit_files(path: Path, files: Mapping[str, str | None], message: str) -> str:
    """Write `files` in the worktree at `path` (None removes one), add everything
    and commit on HEAD; the new commit's hex."""
    root = Path(open_repo(path).workdir)
    for name, text in files.items():
        target = root / name
        if text is None:
            target.unlink(missing_ok=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
    repo = open_repo(path)
    repo.index.add_all()
    repo.index.write()
    tree = repo.index.write_tree()
    parents = [] if repo.head_is_unborn else [repo.head.target]
    return str(repo.create_commit("HEAD", AUTHOR, AUTHOR, message, tree, parents))


def attempt_worktree(repo: pygit2.Repository, path: Path, name: str, start: str) -> Path:
    """A linked worktree at `path` on a new branch `name` at commit `start`, as the
    placer makes an executor's attempt worktree; `path`."""
    branch = repo.branches.local.create(name, repo[start])  # type: ignore[arg-type]
    repo.add_worktree(name, str(path), branch)
    return path


def open_repo(path: Path) -> pygit2.Repository:
    """The repository (or linked worktree) `path` is in."""
    found = pygit2.discover_repository(str(path))
    assert found is not None, f"{path} is in no git repository"
    return pygit2.Repository(found)


def head_of(path: Path) -> str:
    """The hex of the commit HEAD of the worktree at `path` is at."""
    return str(open_repo(path).head.target)


def status_of(path: Path) -> dict[str, pygit2.enums.FileStatus]:
    """`git status` of the worktree at `path`: {path: status}, ignored files left
    out; {} when it is clean."""
    return {
        name: pygit2.enums.FileStatus(flags)
        for name, flags in open_repo(path).status().items()
        if not flags & _IGNORED
    }


def commit_at(repo: pygit2.Repository, rev: str) -> pygit2.Commit:
    """The commit `rev` (a hex, a ref name or HEAD) names."""
    return repo.revparse_single(rev).peel(pygit2.Commit)


def files_at(repo: pygit2.Repository, rev: str) -> dict[str, str]:
    """{path: text} of every file in the tree of `rev` (a hex, a ref or HEAD)."""
    commit = commit_at(repo, rev)
    out: dict[str, str] = {}

    def walk(tree: pygit2.Tree, prefix: str) -> None:
        for entry in tree:
            name = f"{prefix}{entry.name}"
            obj = repo[entry.id]
            if isinstance(obj, pygit2.Tree):
                walk(obj, f"{name}/")
            elif isinstance(obj, pygit2.Blob):
                out[name] = obj.data.decode("utf-8")

    walk(commit.tree, "")
    return out


def changed_files(repo: pygit2.Repository, old: str, new: str) -> list[str]:
    """The paths that differ between the trees of commits `old` and `new`, sorted."""
    diff = repo.diff(commit_at(repo, old), commit_at(repo, new))
    return sorted({delta.new_file.path for delta in diff.deltas})
