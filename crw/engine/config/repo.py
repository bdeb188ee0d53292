"""The run's repository: which git checkout a run's calls work in, and its head.

A workflow names it with `repo = "PATH"` (relative to the workflow file); without
it, the run's repository is the git checkout the run is started from, which is the
checkout whose state directory (`.crw/` at its root) holds the run. A `--state` or
`$CRW_STATE` outside every checkout leaves a run without a repository unless the
workflow names one: its calls work in plain directories (kind "directory"), and
the start preview says so. The head is the workflow's `head = "REF"` (a branch,
tag or commit), else the repository's HEAD, resolved to a commit once, at start;
run.json records both (`repository`, `head`) so every process of the run uses them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from crw.errors import InputError

# pygit2 is imported in each function, and only once a repository may be there:
# the commands that load a workflow without a `repo` never pay for it, nor does a
# start outside every checkout (a sixth of its start's CPU).


def may_hold_repository(path: Path) -> bool:
    """Whether libgit2's discovery from the existing directory `path` may find a
    repository: `path` or a directory above it (as written or resolved) holds a
    `.git` or a `HEAD` (a bare repository), or cannot be looked at. False only when
    discovery would find none, so it decides without loading git."""
    for start in (path, path.resolve()):
        for directory in (start, *start.parents):
            try:
                if os.path.lexists(directory / ".git") or os.path.lexists(directory / "HEAD"):
                    return True
            except OSError:
                return True
    return False


def checkout_root(path: Path) -> Path | None:
    """The root of the (non-bare) git checkout that holds `path`, resolved; None
    when there is none. A path that does not exist yet is judged by the nearest
    directory above it that does."""
    existing = path.absolute()
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not may_hold_repository(existing):
        return None
    import pygit2

    try:
        found = pygit2.discover_repository(str(existing))
    except pygit2.GitError:
        return None
    if found is None:
        return None
    try:
        workdir = pygit2.Repository(found).workdir
    except pygit2.GitError:
        return None
    return Path(workdir).resolve() if workdir else None


def named_checkout(value: str, workflow_file: Path) -> Path | None:
    """The checkout root `repo = value` names, relative to the workflow file's
    directory; None when the path is no git checkout."""
    path = Path(value)
    if not path.is_absolute():
        path = workflow_file.parent / path
    if not path.is_dir():
        return None
    return checkout_root(path)


@dataclass(frozen=True)
class RunRepository:
    """What run.json records of the run's repository: its checkout root and the
    head commit (hex) non-executor calls check out. Both None: no repository."""

    path: str | None = None
    head: str | None = None


def run_repository(
    repo: Path | None, head: str | None, state_dir: Path, workflow_file: Path
) -> RunRepository:
    """The run's repository and head commit, decided at start.

    `repo` is the workflow's resolved `repo` option (None: the checkout that holds
    `state_dir`); `head` its `head` option (None: the repository's HEAD).

    Raises:
        InputError: `head` names no commit of the repository, or the repository
            has no commit yet; one line naming the workflow file and the fix.
    """
    root = repo if repo is not None else checkout_root(state_dir)
    if root is None:
        return RunRepository()
    import pygit2

    repository = pygit2.Repository(str(root))
    try:
        commit = repository.revparse_single(head or "HEAD").peel(pygit2.Commit)
    except (KeyError, ValueError, pygit2.GitError, pygit2.InvalidSpecError):
        if head is None:
            raise InputError(
                f"{workflow_file}: the repository {root} has no commit at HEAD; "
                'commit once, or set head = "REF" in the workflow'
            ) from None
        raise InputError(
            f'{workflow_file}: head = "{head}" names no commit of the repository {root}; '
            "give a branch, tag or commit of it, or leave head out for its HEAD"
        ) from None
    return RunRepository(path=str(root), head=str(commit.id))
