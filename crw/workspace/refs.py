"""The run's refs, moved only by compare-and-swap: stray refs and node branches.

A run's refs live under `refs/crw/flow/<run>/`: the node branch
`refs/crw/flow/<run>/nodes/<node>` (its last crw.commit) and one stray ref per
executor call, `refs/crw/flow/<run>/stray/<node>/a<attempt>-<call>`, which keeps a
HEAD the call's subagent moved by committing (HARV-49). The call is in the name, so
each executor call of one allocation (a build and its fix rounds) keeps its own
(HARV-50).

Two processes may race on one ref; neither overwrites the other. Every swap, a
create against no ref as well as a move, is a `repo.transaction()`: the ref is
locked (its lock file made exclusively), its value read again under the lock and
compared with the old value the mover holds (None: no ref), and only then set.
The loser of a race gets `SwapFailed` with the value it found, and re-reads.

A create is not `references.create(..., force=False)`: libgit2 (1.9, pygit2 1.21)
checks that the ref is absent before it takes the lock, so two processes that
create one ref at once both succeed, the second overwriting the first (a test
with two processes shows it); under the transaction's lock the check holds.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import pygit2
import pygit2.transaction

from crw.errors import RefusedError

ROOT = "refs/crw/flow"


def run_prefix(run: str) -> str:
    """`refs/crw/flow/<run>/`: every ref the run moves itself."""
    return f"{ROOT}/{run}/"


def node_ref(run: str, node: str) -> str:
    """The node branch, advanced by crw.commit."""
    return f"{ROOT}/{run}/nodes/{node}"


def stray_ref(run: str, node: str, attempt: int, call: str) -> str:
    """The stray ref of one executor call's attempt (HARV-49, HARV-50)."""
    return f"{ROOT}/{run}/stray/{node}/a{attempt}-{call}"


class SwapFailed(Exception):
    """A compare-and-swap found another value than the old one it was given."""

    def __init__(self, name: str, expected: str | None, found: str | None) -> None:
        super().__init__(f"{name}: expected {expected or 'no ref'}, found {found or 'no ref'}")
        self.name, self.expected, self.found = name, expected, found


class NotFastForward(Exception):
    """A stray ref holds a commit the new HEAD does not descend from (HARV-52)."""

    def __init__(self, name: str, held: str, head: str) -> None:
        super().__init__(f"{name} holds {held}; {head} does not descend from it")
        self.name, self.held, self.head = name, held, head


def common(repo: pygit2.Repository, name: str) -> pygit2.Repository:
    """The repository a ref named `name` is moved in: a worktree's own `HEAD` in
    the worktree, every other ref in the common repository, so that every mover
    locks and reads the same files. (libgit2 1.9, pygit2 1.21, opened on a worktree
    looks for an existing shared ref in the worktree's git directory: a create
    against no ref made there overwrote a ref that existed.)"""
    if name == "HEAD":
        return repo
    pointer = Path(repo.path) / "commondir"
    if not pointer.is_file():
        return repo
    return pygit2.Repository(str((Path(repo.path) / pointer.read_text().strip()).resolve()))


def read(repo: pygit2.Repository, name: str) -> str | None:
    """The commit `name` points at (hex), or None when there is no such ref."""
    ref = repo.references.get(name)
    if ref is None:
        return None
    return str(ref.resolve().target)


def swap(
    repo: pygit2.Repository, name: str, old: str | None, new: str, *, message: str = "crw flow"
) -> None:
    """Set `name` to `new` if it holds `old` (None: if there is no such ref).

    Raises:
        SwapFailed: the ref held another value; nothing was changed.
        RefLocked: its lock stayed taken.
    """
    repo = common(repo, name)
    with repo.transaction() as tx:
        _lock(repo, tx, name)
        found = read(repo, name)  # under the lock: no other mover can change it now
        if found != old:
            raise SwapFailed(name, old, found)  # leaving the block unlocks, unchanged
        tx.set_target(name, new, message=message)


def remove(repo: pygit2.Repository, name: str, old: str) -> None:
    """Delete `name` if it holds `old`, under its lock as `swap` moves one.

    Raises:
        SwapFailed: the ref held another value, or none; nothing was changed.
        RefLocked: its lock stayed taken.
    """
    repo = common(repo, name)
    with repo.transaction() as tx:
        _lock(repo, tx, name)
        found = read(repo, name)
        if found != old:
            raise SwapFailed(name, old, found)
        tx.remove(name)


def _lock(repo: pygit2.Repository, tx: pygit2.transaction.ReferenceTransaction, name: str) -> None:
    """Lock `name` in `tx`, waiting while another mover holds it (a swap holds its
    lock for a moment), so the value read next is the winner's.

    Raises:
        RefLocked: the lock stayed taken (a process that died holding it).
    """
    for _ in range(LOCK_TRIES):
        try:
            tx.lock_ref(name)
            return
        except pygit2.GitError:
            time.sleep(LOCK_WAIT)
    raise RefLocked(repo, name)


def clear_left_lock(repo: pygit2.Repository, name: str) -> bool:
    """Remove the lock file of `name` (in the repository `swap` moves it in) that a
    process killed while it moved the ref left; True when there was one.

    libgit2 and git write a ref through `<ref>.lock`, made exclusively, and never
    take over one that is there: a process SIGKILLed inside a swap would stop
    every later mover of that ref at `RefLocked`. Only a caller that knows no live
    process can hold the lock calls this (`crw.workspace.commit.clear_left_locks`)."""
    lock = Path(common(repo, name).path) / f"{name}.lock"
    try:
        lock.unlink()
    except FileNotFoundError:
        return False
    return True


LOCK_TRIES, LOCK_WAIT = 200, 0.01
"""How long a swap waits for another mover's lock: 200 tries 10 ms apart."""


class RefLocked(RefusedError):
    """A ref's lock file stayed: one line naming it and the fix."""

    def __init__(self, repo: pygit2.Repository, name: str) -> None:
        lock = Path(repo.path) / f"{name}.lock"
        super().__init__(
            f"the ref {name} stays locked ({lock}); if no git command is running on "
            "the repository, remove that file, then resume the run"
        )


@dataclass(frozen=True)
class Kept:
    """What keeping a HEAD on a stray ref did: `created`, `moved` (a fast-forward
    from `old`), or nothing (`already`: the ref held the HEAD)."""

    ref: str
    head: str
    action: str
    old: str | None = None


def keep_stray(repo: pygit2.Repository, name: str, head: str) -> Kept:
    """Keep `head` on the stray ref `name`: created against no ref (HARV-51), or moved
    by a fast-forward with the commit it holds as the old value (HARV-52). A swap
    lost to another process is read again and decided again.

    Raises:
        NotFastForward: the ref holds a commit `head` does not descend from.
    """
    while True:
        held = read(repo, name)
        if held == head:
            return Kept(name, head, "already", held)
        if held is not None and not repo.descendant_of(pygit2.Oid(hex=head), pygit2.Oid(hex=held)):
            raise NotFastForward(name, held, head)
        try:
            swap(repo, name, held, head, message="crw flow: stray HEAD")
        except SwapFailed:
            continue
        return Kept(name, head, "created" if held is None else "moved", held)
