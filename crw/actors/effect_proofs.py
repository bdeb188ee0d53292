"""A resumed run's effect proofs: the refs the rows announce, then their proofs.

Before any call goes on, a process that takes over a run on git finishes what the
process before it recorded and did not do, then proves every executor call:

1. a completed call whose crw_commit row was lost with its batch gets the row
   (`commit.record_missing`), durable before any ref moves;
2. the newest crw.commit of each node is applied again (`commit.apply`: each ref
   by compare-and-swap, from the old value the row records or already at the new
   one), so every crash point after the row ends with the same refs; a process
   killed inside a swap left the ref's lock file, which is removed first
   (`commit.clear_left_locks`), else every later process would stop at it;
3. each proof is derived from the rows and the refs (`proof.derive`), and a call
   whose proof fails is held `effect_proof_mismatch`, with the mismatch as error.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterable, Mapping
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio

from crw.actors.journal_writer import JournalWriter
from crw.journal.replay import TERMINAL_ROWS
from crw.journal.rows import CrwCommit, ExecutorHeadMoved, RowModel

if TYPE_CHECKING:  # git is imported when the run has a repository
    import pygit2

Row = Mapping[str, Any]

log = logging.getLogger("crw.run")


def epoch(stamp: str) -> int:
    """Seconds since the epoch of a row time (`2026-01-01T00:00:00.000000Z`)."""
    return int(datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp())


def open_repository(repository: str | None) -> pygit2.Repository | None:
    """The run's repository (run.json's); None for a run without one (its calls
    work in plain directories: it has no effects on git) or one that is gone."""
    if not repository or not Path(repository).is_dir():
        return None
    import pygit2

    try:
        return pygit2.Repository(repository)
    except pygit2.GitError:
        return None


PROOF_ROWS = frozenset({"prepared", "completed", "crw_commit", *TERMINAL_ROWS})
"""The rows the proofs read; the others are left out in one pass."""


def newest_commits(rows: Iterable[Row]) -> list[tuple[CrwCommit, ExecutorHeadMoved | None]]:
    """The newest crw_commit row of each node, with its call's executor_head_moved."""
    moved: dict[str, Any] = {}
    newest: dict[str, CrwCommit] = {}
    for row in rows:
        if row.get("row") == "completed" and row.get("call"):
            moved[row["call"]] = row.get("executor_head_moved")
        elif row.get("row") == "crw_commit" and row.get("node"):
            newest[row["node"]] = CrwCommit.model_validate(dict(row))
    taken = []
    for made in newest.values():
        head = moved.get(made.call or "")
        taken.append((made, ExecutorHeadMoved.model_validate(head) if head else None))
    return taken


def _apply_newest(repo: pygit2.Repository, rows: list[Row]) -> None:
    from crw.workspace import commit

    for made, moved in newest_commits(rows):
        workspace = commit.workspace_of(rows, made.call or "")
        for name in commit.clear_left_locks(repo, made, moved, workspace):
            log.warning("removed the lock a killed process of the run left on %s", name)
        try:
            commit.apply(repo, made, moved, workspace)
        except commit.EffectRefused:
            continue  # its proof says so, and holds the call


async def settle(
    journal: JournalWriter,
    rows: list[dict[str, Any]],
    *,
    run: str,
    repository: str | None,
    now: str,
) -> list[dict[str, Any]]:
    """Finish and prove the run's effects; the rows it committed."""
    repo = await trio.to_thread.run_sync(open_repository, repository)
    if repo is None:
        return []
    from crw.workspace import commit, proof

    rows = [row for row in rows if row.get("row") in PROOF_ROWS]
    taken: list[dict[str, Any]] = []

    async def write(made: list[RowModel]) -> None:
        if made:
            taken.extend(row.model_dump() for row in await journal.commit(made))

    recorded: list[RowModel] = []
    for call in proof.unrecorded(rows):
        missing = functools.partial(commit.record_missing, run=run, when=epoch(now))
        recorded.append(await trio.to_thread.run_sync(missing, repo, rows, call))
    await write(recorded)
    seq: list[Row] = [*rows, *taken]
    await trio.to_thread.run_sync(_apply_newest, repo, seq)
    snap = await trio.to_thread.run_sync(proof.snapshot, repo, seq)
    await write(list(proof.held_rows(proof.derive(seq, snap))))
    return taken
