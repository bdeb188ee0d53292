"""The placer's git effects: make, restore and release a call's worktree P (pygit2).

`make` is idempotent, so every crash point between the prepared row and P made
resumes to the same P:

    nothing yet             the branch is made at the commit P is to be at, then
                            the worktree on it (a checkout's then detached at its
                            start commit and its branch deleted)
    branch only             the branch is kept (fast-forwarded to that commit when
                            it is behind it), the worktree added on it
    P's directory alone     libgit2 stopped after its mkdir: an empty P is removed
                            and made again
    a half-made worktree    libgit2's add cut before its checkout ended (it writes
                            the record `.git/worktrees/<name>`, P, P's `.git` file,
                            the record's commondir, gitdir and HEAD, P's files,
                            the record's index, in that order): a record without
                            all four is removed, with P (libgit2's files alone:
                            no call ran in a P not made yet), and P made again
    worktree record alone   P was deleted (or never checked out): the stale record
                            is pruned and P made again at the same path
    P made                  kept as it is (a checkout's HEAD is detached when the
                            crash came before that)

The commit an executor's worktree is to be at is the node's last crw.commit after
its allocation (the node ref, when it is the allocation's start or a descendant
of it), else the allocation's start (`expected_commit`). A branch that holds
commits of its own is never moved backwards nor deleted.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Protocol

import pygit2

from crw.engine.run.rundir import PRIVATE_DIR
from crw.errors import RefusedError
from crw.journal.rows import Allocation
from crw.workspace import refs
from crw.workspace.names import CHECKOUT, DIRECTORY, WORKTREE, node_ref, worktree_name


class Placer(Protocol):
    """What the git effects read of the run's placer (`crw.workspace.placer.Placer`):
    the run's id and its repository (None: the calls work in plain directories)."""

    @property
    def run_id(self) -> str: ...
    @property
    def repository(self) -> str | None: ...


_WHOLE = ("commondir", "gitdir", "HEAD", "index")
"""The files of a worktree's record libgit2's add writes last (the index once P's
files are checked out): a record without one of them is a half-made worktree."""

_TEMPORARY = "refs/heads/crw/{run}/checkout-{name}"
"""The branch a checkout is added on before its HEAD is detached (libgit2 adds a
worktree on a branch only)."""


def ref_commit(repository: str, name: str) -> str | None:
    """The commit (hex) ref `name` points at; None when there is no such ref."""
    repo = pygit2.Repository(repository)
    ref = repo.references.get(name)
    if ref is None:
        return None
    return str(ref.peel(pygit2.Commit).id)


def expected_commit(repository: str, run_id: str, node: str, allocation: Allocation) -> str | None:
    """The commit an executor's worktree is to be at: the node's last crw.commit
    after the allocation (the node ref when it is the allocation's start or a
    descendant of it), else the allocation's start. Another kind: its start."""
    start = allocation.start_commit
    if allocation.kind != WORKTREE or start is None:
        return start
    repo = pygit2.Repository(repository)
    ref = repo.references.get(node_ref(run_id, node))
    if ref is None:
        return start
    tip = ref.peel(pygit2.Commit).id
    if str(tip) == start or repo.descendant_of(tip, pygit2.Oid(hex=start)):
        return str(tip)
    return start


def make(placer: Placer, allocation: Allocation, node: str) -> None:
    """Make or restore P as `allocation` says (see the module docstring).

    Raises:
        RefusedError: P is a directory that holds files but no worktree, or the
            repository refused; one line naming P and the fix.
    """
    path = Path(str(allocation.workspace))
    if allocation.kind in (None, DIRECTORY) or placer.repository is None:
        path.mkdir(mode=PRIVATE_DIR, parents=True, exist_ok=True)
        return
    start = allocation.start_commit
    assert start is not None, "a worktree allocation records its start commit"
    repo = pygit2.Repository(placer.repository)
    name = worktree_name(placer.run_id, path)
    record = Path(repo.path) / "worktrees" / name
    if record.is_dir() and not all((record / part).exists() for part in _WHOLE):
        # A half-made worktree: P could not be opened, or lacks files. libgit2 makes
        # the record's directory before P, so P, when there, is its own. P goes
        # first: a process killed before the record is gone leaves a half record,
        # which the next one finishes (the other way round, P with its .git file
        # and no record, which libgit2 cannot open).
        if path.exists():
            shutil.rmtree(path)
        shutil.rmtree(record)
    elif (path / ".git").is_file() and not record.is_dir():
        raise RefusedError(
            f"the call directory {path} is a git worktree whose record {record} is gone; "
            "move the directory away, then resume the run"
        )
    if (path / ".git").exists():  # made: kept as it is
        if allocation.kind == CHECKOUT:
            _detach(repo, path, start, _temporary(placer.run_id, name))
        return
    if path.exists():
        if any(path.iterdir()):
            raise RefusedError(
                f"the call directory {path} holds files but no git worktree; "
                "move them away, then resume the run"
            )
        path.rmdir()  # libgit2 stopped after making it
    _prune(repo, name)
    target = expected_commit(placer.repository, placer.run_id, node, allocation) or start
    branch = allocation.branch or _temporary(placer.run_id, name)
    ref = _branch_at(repo, branch, target)
    path.parent.mkdir(mode=PRIVATE_DIR, parents=True, exist_ok=True)
    try:
        repo.add_worktree(name, str(path), ref)
    except pygit2.GitError as err:
        raise RefusedError(
            f"cannot make the worktree {path} in {placer.repository}: {err}; "
            "fix the repository, then resume the run"
        ) from None
    os.chmod(path, PRIVATE_DIR)
    if allocation.kind == CHECKOUT:
        _detach(repo, path, start, branch)


def release(placer: Placer, allocation: Allocation, node: str) -> None:
    """Release a worktree P: remove its directory, prune the repository's record of
    it, and delete its branch when that holds no commit of its own (its tip is the
    start commit, or the node ref holds it). A plain directory is left as it is."""
    if allocation.kind in (None, DIRECTORY) or placer.repository is None:
        return
    path = Path(str(allocation.workspace))
    repo = pygit2.Repository(placer.repository)
    name = worktree_name(placer.run_id, path)
    if path.exists():
        shutil.rmtree(path)
    _prune(repo, name)
    for branch in (allocation.branch, _temporary(placer.run_id, name)):
        if branch is None:
            continue
        _clear_stale_lock(repo, branch)
        ref = repo.references.get(branch)
        if ref is None:
            continue
        tip = str(ref.peel(pygit2.Commit).id)
        if tip == allocation.start_commit or _held_by_node(repo, placer.run_id, node, tip):
            repo.references.delete(branch)


def _held_by_node(repo: pygit2.Repository, run_id: str, node: str, tip: str) -> bool:
    """The node ref of the call's node is at `tip` or a descendant of it: the branch
    holds nothing of its own. One ref read, whatever the number of the run's refs."""
    ref = repo.references.get(node_ref(run_id, node))
    if ref is None:
        return False
    held = ref.peel(pygit2.Commit).id
    return str(held) == tip or repo.descendant_of(held, pygit2.Oid(hex=tip))


def _temporary(run_id: str, name: str) -> str:
    return _TEMPORARY.format(run=run_id, name=name)


def _clear_stale_lock(repo: pygit2.Repository, branch: str) -> None:
    """Remove the lock file a process killed while it wrote `branch` left.

    libgit2 writes a ref through `<ref>.lock` and never takes over one that is
    there, so a run process SIGKILLed mid-write would stop every later process of
    the run at that ref (`failed to lock file`). The run's branches are written by
    the run's process alone, under its run lock: a lock file of one is stale."""
    refs.clear_left_lock(repo, branch)


def _branch_at(repo: pygit2.Repository, branch: str, target: str) -> pygit2.Reference:
    """`branch`, made at `target` when missing, fast-forwarded to it when behind it;
    a branch with commits `target` does not hold is left where it is."""
    oid = pygit2.Oid(hex=target)
    _clear_stale_lock(repo, branch)
    ref = repo.references.get(branch)
    if ref is None:
        return repo.references.create(branch, oid)
    tip = ref.peel(pygit2.Commit).id
    if tip != oid and repo.descendant_of(oid, tip):
        ref.set_target(oid, "crw: the worktree restored at its commit")
    return ref


def _detach(repo: pygit2.Repository, path: Path, start: str, branch: str) -> None:
    """A checkout's HEAD, still on the branch it was added on, detached at `start`,
    and that branch deleted (a HEAD anywhere else is left where it is)."""
    checkout = pygit2.Repository(str(path))
    if not checkout.head_is_detached and checkout.head.name == branch:
        # Not detached yet: no subagent has worked here, so a HEAD lock is one a
        # process killed inside this very set_head left.
        refs.clear_left_lock(checkout, "HEAD")
        checkout.set_head(pygit2.Oid(hex=start))
    _clear_stale_lock(repo, branch)
    ref = repo.references.get(branch)
    if ref is not None:
        repo.references.delete(branch)


def _prune(repo: pygit2.Repository, name: str) -> None:
    """Forget the worktree `name` when its directory is gone (or was never made).
    One lookup of its record: a listing of the repository's worktrees (libgit2
    reads each one's files) cost a make and a release O(live worktrees), and a run
    on git holds one a call until it ends."""
    try:
        worktree = repo.lookup_worktree(name)
    except pygit2.GitError:  # no record of it (or one git itself would not list)
        return
    if worktree.is_prunable or not Path(worktree.path).exists():
        worktree.prune(True)
