"""An executor's harvest on git: its pending tree, its HEAD, and crw.commit.

At the harvest of an executor call whose P is an attempt worktree:

- the pending tree is the tree of P with everything added (untracked files too,
  `.gitignore` honoured), built in an index held in memory: the worktree's index
  file is not written;
- the HEAD is compared with the commit the worktree is to be at (HARV-48,
  `to_be_at`); a HEAD the subagent moved by committing is kept on the call's stray
  ref (`crw.workspace.refs`) and recorded as executor_head_moved (HARV-49, HARV-53);
- crw.commit commits the pending tree on that commit, and records it in a
  `crw_commit` row (HARV-54). The commit object is written before the row (an
  object no ref names changes nothing); the row is committed with the completed
  row; only then do the refs move, each by compare-and-swap (`apply`): the stray
  ref, the worktree's HEAD from the observed HEAD, the node branch from the node's
  last crw.commit. Each move finds its ref at the old value or already at the new
  one, so `apply` run again after a crash at any point ends the same.

`to_be_at` and `node_tip` are pure (rows in); the rest reads or writes git.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pygit2

from crw.errors import RefusedError
from crw.journal.rows import CrwCommit, ExecutorHeadMoved
from crw.workspace import refs

Row = Mapping[str, Any]

AUTHOR_NAME = "crw flow"
AUTHOR_EMAIL = "crw-flow@localhost"


def _allocation(rows: Iterable[Row], call: str) -> tuple[Row | None, int]:
    """The call's newest prepared row and where in `rows` its allocation was made:
    the first prepared row of the node with the same workspace (a build and its fix
    rounds share one allocation)."""
    seq = list(rows)
    mine = None
    for row in seq:
        if row.get("row") == "prepared" and row.get("call") == call:
            mine = row
    if mine is None:
        return None, 0
    workspace = (mine.get("allocation") or {}).get("workspace")
    for i, row in enumerate(seq):
        same = (row.get("allocation") or {}).get("workspace") == workspace
        if row.get("row") == "prepared" and row.get("node") == mine.get("node") and same:
            return mine, i
    return mine, 0  # pragma: no cover - `mine` itself matches


def to_be_at(rows: Iterable[Row], call: str) -> str | None:
    """The commit `call`'s worktree is to be at (HARV-48): the node's last crw.commit
    after the allocation the worktree was made for, else that allocation's start
    commit. None: the call has no prepared row with a start commit."""
    seq = list(rows)
    prepared, made_at = _allocation(seq, call)
    if prepared is None:
        return None
    node = prepared.get("node")
    last = (prepared.get("allocation") or {}).get("start_commit")
    for row in seq[made_at:]:
        if row.get("row") == "crw_commit" and row.get("node") == node and row.get("commit"):
            last = row["commit"]
    return last


def node_tip(rows: Iterable[Row], node: str) -> str | None:
    """The node's last crw.commit in the rows: what its node branch holds."""
    tip = None
    for row in rows:
        if row.get("row") == "crw_commit" and row.get("node") == node and row.get("commit"):
            tip = row["commit"]
    return tip


def pending_tree(workspace: str | Path) -> str:
    """The tree of P with everything added, untracked files included and ignored
    ones left out. The index is read into memory and never written back."""
    repo = pygit2.Repository(str(workspace))  # its own index object, dropped after
    index = repo.index
    index.add_all()  # adds new and changed files, drops deleted ones
    return str(index.write_tree())


def observed_head(workspace: str | Path) -> tuple[str, str]:
    """P's HEAD: the ref to compare-and-swap (the branch HEAD names, or `HEAD` when
    detached) and the commit it is at."""
    repo = pygit2.Repository(str(workspace))
    head = repo.references["HEAD"]
    name = head.target if head.type == pygit2.enums.ReferenceType.SYMBOLIC else "HEAD"
    return str(name), str(repo.head.target)


def commit_object(repo: pygit2.Repository, row: CrwCommit, call: str) -> str:
    """Write crw.commit's commit object (the pending tree on start, at `when`);
    the same row always gives the same commit."""
    assert row.tree and row.start and row.when is not None
    sig = pygit2.Signature(AUTHOR_NAME, AUTHOR_EMAIL, row.when, 0)
    message = f"crw.commit {call}\n\nnode {row.node}\n"
    tree, parent = pygit2.Oid(hex=row.tree), pygit2.Oid(hex=row.start)
    return str(repo.create_commit(None, sig, sig, message, tree, [parent]))


@dataclass(frozen=True)
class Harvest:
    """What an executor's harvest records: the completed row's pending_tree and
    executor_head_moved, and the crw_commit row."""

    pending_tree: str
    moved: ExecutorHeadMoved | None
    commit: CrwCommit


def harvest(
    workspace: str | Path,
    rows: Iterable[Row],
    *,
    run: str,
    node: str,
    call: str,
    attempt: int,
    when: int,
) -> Harvest | None:
    """Read P and prepare crw.commit (its commit object written; no ref moved).
    None: the call has no commit to be at (P is not an attempt worktree)."""
    seq = list(rows)
    start = to_be_at(seq, call)
    if start is None:
        return None
    tree = pending_tree(workspace)
    head_ref, head = observed_head(workspace)
    moved = None
    if head != start:  # the subagent committed (HARV-49)
        moved = ExecutorHeadMoved(
            start=start, head=head, ref=refs.stray_ref(run, node, attempt, call)
        )
    row = CrwCommit(
        call=call,
        node=node,
        tree=tree,
        start=start,
        head=head,
        head_ref=head_ref,
        when=when,
        node_ref=refs.node_ref(run, node),
        node_old=node_tip(seq, node),
    )
    repo = pygit2.Repository(str(workspace))
    row = row.model_copy(update={"commit": commit_object(repo, row, call)})
    return Harvest(tree, moved, row)


def record_missing(
    repo: pygit2.Repository, rows: Iterable[Row], call: str, *, run: str, when: int
) -> CrwCommit:
    """The crw_commit row of a call whose completed row is durable and whose
    crw_commit row is not (a process that died inside the batch): the same
    crw.commit, from the completed row (its commit object written; no ref moved)."""
    seq = list(rows)
    completed = [r for r in seq if r.get("call") == call and r.get("row") == "completed"][-1]
    prepared, _ = _allocation(seq, call)
    assert prepared is not None
    moved = completed.get("executor_head_moved") or {}
    start = moved.get("start") or to_be_at(seq, call)
    workspace = (prepared.get("allocation") or {}).get("workspace")
    head_ref = observed_head(workspace)[0] if workspace and Path(workspace).is_dir() else None
    node = str(prepared.get("node"))
    row = CrwCommit(
        call=call,
        node=node,
        tree=completed.get("pending_tree"),
        start=start,
        head=moved.get("head") or start,
        head_ref=head_ref,
        when=when,
        node_ref=refs.node_ref(run, node),
        node_old=node_tip(seq, node),
    )
    return row.model_copy(update={"commit": commit_object(repo, row, call)})


def workspace_of(rows: Iterable[Row], call: str) -> str | None:
    """P of `call`, from its prepared row."""
    prepared, _ = _allocation(rows, call)
    return (prepared.get("allocation") or {}).get("workspace") if prepared else None


class EffectRefused(Exception):
    """A ref holds neither the old value crw.commit recorded nor the new one."""

    def __init__(self, ref: str, detail: str) -> None:
        super().__init__(f"{ref}: {detail}")
        self.ref, self.detail = ref, detail


def apply(
    repo: pygit2.Repository,
    row: CrwCommit,
    moved: ExecutorHeadMoved | None,
    workspace: str | Path | None,
) -> None:
    """Move the refs the rows announce, each by compare-and-swap, in order: the
    stray ref (HARV-49, HARV-51, HARV-52), P's HEAD from the observed HEAD to the
    commit (HARV-54; skipped when P is gone), the node branch from the node's last
    crw.commit. A ref already at its new value is left; run again after a crash,
    it ends the same. P's index is written as the commit's tree once P's HEAD is
    there (`_index_at`), so `git status` in P shows no change, as before the call.

    Raises:
        EffectRefused: a ref holds neither value (it was moved by someone else).
        IndexLocked: P's index stayed locked; P's HEAD is at the commit, the node
            branch not moved yet.
    """
    assert row.commit and row.node_ref
    if moved is not None and moved.ref and moved.head:
        try:
            refs.keep_stray(repo, moved.ref, moved.head)
        except refs.NotFastForward as refused:
            raise EffectRefused(moved.ref, str(refused)) from None
    if workspace is not None and Path(workspace).is_dir() and row.head_ref:
        tree = pygit2.Repository(str(workspace))
        _move(tree, row.head_ref, row.head, row.commit)
        _index_at(tree, row.commit, str(workspace))
    _move(repo, row.node_ref, row.node_old, row.commit)


def _index_at(tree: pygit2.Repository, commit: str, workspace: str) -> None:
    """Write P's index as `commit`'s tree (P's files are the pending tree, which the
    commit holds), unless it holds that tree already: the apply that moved P's HEAD
    wrote it, where a process killed between the two did not, and the next one
    does. A git command in P (a `git status` refreshing the index) holds the
    index's lock for a moment: it is waited for as `refs.swap` waits for a ref's.

    An index libgit2 cannot read (a damaged byte) is made again from the commit:
    P's HEAD is there, and the index is what the commit's tree says.

    Raises:
        IndexLocked: the lock stayed taken.
    """
    target = tree[commit].peel(pygit2.Tree)
    try:
        index = tree.index
    except pygit2.GitError:
        Path(tree.path, "index").unlink(missing_ok=True)
        index = tree.index  # none on disk: an empty one
    if _index_holds(index, target):
        return
    index.read_tree(target)
    lock = _index_lock(tree)
    for _ in range(refs.LOCK_TRIES):
        try:
            index.write()
            return
        except pygit2.GitError:
            if not lock.exists():
                raise
            time.sleep(refs.LOCK_WAIT)
    raise IndexLocked(workspace, lock)


def _index_holds(index: pygit2.Index, target: pygit2.Tree) -> bool:
    """Whether `index` holds the tree `target` entry for entry."""
    return len(index.diff_to_tree(target)) == 0


def _index_lock(tree: pygit2.Repository) -> Path:
    """The lock file git and libgit2 write P's index through (made exclusively,
    renamed over the index)."""
    return Path(tree.path) / "index.lock"


class IndexLocked(RefusedError):
    """P's index lock stayed: one line naming it and the fix."""

    def __init__(self, workspace: str, lock: Path) -> None:
        super().__init__(
            f"the index of {workspace} stays locked ({lock}); if no git command is "
            f"running in {workspace}, remove that file, then resume the run"
        )


def clear_left_locks(
    repo: pygit2.Repository,
    row: CrwCommit,
    moved: ExecutorHeadMoved | None,
    workspace: str | Path | None,
) -> list[str]:
    """Remove the lock files a process of the run, killed inside `apply` of `row`,
    left on the refs `apply` moves; the refs whose lock it removed.

    Called by the process that takes the run over, before it applies the row again
    (`crw.actors.effect_proofs`): it holds the run, so no other process of the run
    lives; the stray ref and the node branch are moved by the run's process alone,
    and the worktree's branch by its subagent only before the call completed, which
    its crw_commit row follows. A lock on one of them is one a dead process left.

    P's index lock too, when P's HEAD is at the row's commit and its index holds
    another tree: the process was killed inside the index's write that follows
    P's HEAD (`_index_at`), before any later call could run in P (a later call's
    subagent would have had to stage files to change the index, and its packet
    has it run no `git add`). A git command someone runs in P meanwhile holds the
    lock for a moment: it is waited for first."""
    names: list[tuple[pygit2.Repository, str]] = []
    cleared: list[str] = []
    if moved is not None and moved.ref:
        names.append((repo, moved.ref))
    if workspace is not None and Path(workspace).is_dir() and row.head_ref:
        tree = pygit2.Repository(str(workspace))
        names.append((tree, row.head_ref))
        if row.commit and _index_left_locked(tree, row.commit):
            cleared.append(f"the index of {workspace}")
    if row.node_ref:
        names.append((repo, row.node_ref))
    return [name for where, name in names if refs.clear_left_lock(where, name)] + cleared


def _index_left_locked(tree: pygit2.Repository, commit: str) -> bool:
    """Remove the lock on P's index that a process killed inside `_index_at` left;
    True when there was one. Only while P's HEAD is at `commit` and the index holds
    another tree (else no apply was writing it), and only once the lock stayed for
    as long as `_index_at` waits for a git command's."""
    lock = _index_lock(tree)
    if not lock.exists() or str(tree.head.target) != commit:
        return False
    with contextlib.suppress(pygit2.GitError):  # unreadable: `_index_at` makes it again
        if _index_holds(tree.index, tree[commit].peel(pygit2.Tree)):
            return False
    for _ in range(refs.LOCK_TRIES):
        if not lock.exists():
            return False
        time.sleep(refs.LOCK_WAIT)
    try:
        lock.unlink()
    except FileNotFoundError:
        return False
    return True


def _move(repo: pygit2.Repository, name: str, old: str | None, new: str) -> bool:
    """Compare-and-swap `name` from `old` to `new`; False when it is at `new` already."""
    try:
        refs.swap(repo, name, old, new, message="crw.commit")
    except refs.SwapFailed as failed:
        if failed.found == new:
            return False
        raise EffectRefused(
            name, f"holds {failed.found or 'no ref'}, not {old or 'no ref'}"
        ) from None
    return True
