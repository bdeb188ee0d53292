"""An executor call's harvest on git, between the harvest decision and its rows.

When the harvest decides a completed row for a call whose P is an attempt
worktree, `prepare` reads P (pending tree, HEAD; `crw.workspace.commit.harvest`)
and writes crw.commit's commit object; the completed row then carries
pending_tree and, when the subagent committed, executor_head_moved, and the
crw_commit row follows it in the same batch. Only once that batch is durable does
`apply` move the refs (stray ref, P's HEAD, node branch), each by
compare-and-swap. A ref someone else moved in between holds the call
effect_proof_mismatch instead (the row `apply` returns).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import trio

from crw.actors.effect_proofs import epoch
from crw.clock import WallClock
from crw.journal.rows import Allocation, Completed, Held, RowModel
from crw.workspace.names import WORKTREE
from crw.workspace.placer import Placer

if TYPE_CHECKING:  # git is imported by an executor's harvest on git alone
    from crw.workspace import commit

GIT_ROWS = frozenset({"prepared", "crw_commit"})
"""The rows `to_be_at` reads of other calls: the run keeps these (`keep`)."""

GitRows = dict[str, list[dict[str, Any]]]
"""The run's prepared and crw_commit rows by node: an executor's harvest reads its
node's alone, so its cost does not grow with the run's other calls."""


def keep(rows: Iterable[Mapping[str, Any]], into: GitRows | None = None) -> GitRows:
    """`into` (a new map when None) with the prepared and crw_commit rows of `rows`
    added under their node."""
    kept: GitRows = {} if into is None else into
    for row in rows:
        if row.get("row") in GIT_ROWS:
            kept.setdefault(str(row.get("node")), []).append(dict(row))
    return kept


@dataclass(frozen=True)
class Effects:
    """What an executor's harvest found, for its rows and then its refs."""

    harvest: commit.Harvest | None
    repository: str | None
    workspace: str | None
    unreadable: str | None = None
    """Why P could not be read (its worktree deleted or broken), if it could not."""

    @property
    def moves_nothing(self) -> bool:
        """Whether `apply` has nothing to do after the rows: no ref, no hold."""
        return self.unreadable is None and (self.harvest is None or self.repository is None)

    def rows(self, end: RowModel) -> list[RowModel]:
        """`end`, with the pending tree and moved HEAD when it is a completed row of
        an executor on git, followed by its crw_commit row."""
        if self.harvest is None or not isinstance(end, Completed):
            return [end]
        done = end.model_copy(
            update={
                "pending_tree": self.harvest.pending_tree,
                "executor_head_moved": self.harvest.moved,
            }
        )
        return [done, self.harvest.commit]


NONE = Effects(None, None, None)

UNREADABLE = "worktree_unreadable"
"""The held reason of an executor whose P could not be read at its harvest."""


async def prepare(
    end: RowModel | None,
    allocation: Allocation | None,
    placer: Placer | None,
    rows: GitRows,
    *,
    node: str,
    call: str,
    attempt: int,
    clock: WallClock,
) -> Effects:
    """Read P of an executor whose turn completed (HARV-48); NONE for any other end
    or call, or a run without git. `clock` stamps the harvest's commit: it is read
    only then, not at every call's end."""
    if not isinstance(end, Completed) or allocation is None or placer is None:
        return NONE
    repository = placer.repository
    if repository is None or allocation.kind != WORKTREE or not allocation.workspace:
        return NONE
    import pygit2

    from crw.workspace import commit

    when = epoch(clock())
    read = functools.partial(
        commit.harvest, run=placer.run_id, node=node, call=call, attempt=attempt, when=when
    )
    try:
        found = await trio.to_thread.run_sync(read, allocation.workspace, rows.get(node, []))
    except (pygit2.GitError, OSError, KeyError, ValueError) as err:
        why = (
            f"cannot read the executor's worktree {allocation.workspace}: {err}; "
            "restore it (or answer skip), then answer retry"
        )
        return Effects(None, repository, allocation.workspace, unreadable=why)
    return Effects(found, repository, allocation.workspace)


async def apply(effects: Effects, call: str) -> Held | None:
    """Move the refs the committed rows announce; the held row of the call when a
    ref was moved by someone else (effect_proof_mismatch), or P could not be read
    (worktree_unreadable)."""
    if effects.unreadable is not None:
        return Held(call=call, reason=UNREADABLE, error=effects.unreadable)
    if effects.harvest is None or effects.repository is None:
        return None
    import pygit2

    from crw.workspace import commit, proof

    found = effects.harvest
    repo = pygit2.Repository(effects.repository)
    try:
        await trio.to_thread.run_sync(
            commit.apply, repo, found.commit, found.moved, effects.workspace
        )
    except commit.EffectRefused as refused:
        return Held(call=call, reason=proof.MISMATCH, error=str(refused))
    return None
