"""The placer: which directory P a call runs in, and making it after the prepared row.

Every call runs in a directory P of its own, `calls/<call>` under the run (STEP-1).
Its kind follows the call's role and the run's repository:

    worktree    an executor's attempt worktree: a git worktree on the run's branch
                `refs/heads/crw/<run>/<call>`, at the node's last crw.commit (the
                node ref `refs/crw/flow/<run>/nodes/<node>`) when there is one,
                else at the head option (STEP-3). The executor roles are the
                writing roles: executor and its tier executor-t1.
    checkout    every other role's call-private checkout: a git worktree with a
                detached HEAD at the head option (STEP-4).
    scratch     a QA capture call (a node with `qa = "capture"`): a worktree on
                its own branch of the run at the head option (STEP-5).
    directory   a run without a repository: a plain directory, as before git.

The allocation (`Allocation`: workspace P, kind, start_commit, branch) is decided
here and recorded in the call's prepared row; P is made only once that row is
durable (STEP-2), by `crw.workspace.worktrees` (the kinds' and the refs' names are
`crw.workspace.names`). One allocation serves every attempt of a call (ATT-15: a
lost attempt's next spawn works in the same P, no worktree is retired between
attempts); an executor node's fix rounds share the build call's.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from crw.engine.config.role_names import WRITING_ROLES
from crw.journal.rows import Allocation
from crw.workspace.names import CHECKOUT, DIRECTORY, SCRATCH, WORKTREE, branch_of, node_ref

log = logging.getLogger("crw.workspace")

QA_CAPTURE = "capture"


def is_executor(role: str) -> bool:
    """An executor role: executor and its tier executor-t1, the roles whose calls
    change their workspace (`crw.engine.config.role_names.WRITING_ROLES`; the spec pairs
    executor-t1 with the executor's agent type)."""
    return role in WRITING_ROLES


def kind_of(role: str, qa: str | None, repository: str | None) -> str:
    """The kind of a call's P: a QA capture call's scratch worktree, an executor's
    attempt worktree, every other role's checkout; a plain directory without a
    repository."""
    if repository is None:
        return DIRECTORY
    if qa == QA_CAPTURE:
        return SCRATCH
    return WORKTREE if is_executor(role) else CHECKOUT


def decide(
    run_id: str,
    call: str,
    role: str,
    qa: str | None,
    workspace: Path,
    repository: str | None,
    head: str | None,
    node_commit: str | None,
) -> Allocation:
    """A new call's allocation. `head` is the run's head commit; `node_commit` the
    node ref's commit when the node has one (an executor starts from it)."""
    kind = kind_of(role, qa, repository)
    if kind == DIRECTORY:
        return Allocation(workspace=str(workspace), kind=kind)
    start = node_commit if kind == WORKTREE and node_commit is not None else head
    branch = branch_of(run_id, call) if kind in (WORKTREE, SCRATCH) else None
    return Allocation(workspace=str(workspace), kind=kind, start_commit=start, branch=branch)


def allocation_of(rows: Iterable[Mapping[str, Any]]) -> Allocation | None:
    """The allocation a call's newest prepared row records (None: not prepared)."""
    found = None
    for row in rows:
        if row.get("row") == "prepared" and isinstance(row.get("allocation"), Mapping):
            found = row["allocation"]
    return Allocation.model_validate(dict(found)) if found is not None else None


@dataclass(frozen=True)
class Placer:
    """The run's placer: its id, repository and head commit (run.json's), and the
    run's calls directory under which every P is."""

    run_id: str
    repository: str | None
    head: str | None
    calls: Path

    def reads_ref(self, role: str, qa: str | None) -> bool:
        """Whether `allocate` reads the node ref for such a call (and blocks on the
        repository); else it only decides, in microseconds."""
        return self.repository is not None and is_executor(role) and qa != QA_CAPTURE

    def allocate(self, call: str, node: str, role: str, qa: str | None) -> Allocation:
        """A new call's allocation; reads the node ref when `reads_ref` (blocking:
        then run it in a thread)."""
        node_commit = None
        if self.repository is not None and self.reads_ref(role, qa):
            from crw.workspace import worktrees

            node_commit = worktrees.ref_commit(self.repository, node_ref(self.run_id, node))
        return decide(
            self.run_id,
            call,
            role,
            qa,
            self.calls / call,
            self.repository,
            self.head,
            node_commit,
        )

    def make(self, allocation: Allocation, node: str) -> None:
        """Make P as `allocation` says, or restore it: idempotent, and a P that
        exists is kept as it is (blocking: run it in a thread)."""
        from crw.workspace import worktrees

        worktrees.make(self, allocation, node)

    def release(self, allocation: Allocation, node: str) -> None:
        """Release a worktree P: its directory and the repository's record of it;
        the branch is deleted only when it holds no commit of its own."""
        from crw.workspace import worktrees

        worktrees.release(self, allocation, node)


def allocations(rows: Iterable[Mapping[str, Any]]) -> dict[str, tuple[Allocation, str]]:
    """Every P the rows name, once (a fix round shares its build call's), with the
    node of the call that first named it; by P."""
    found: dict[str, tuple[Allocation, str]] = {}
    for row in rows:
        allocation = row.get("allocation")
        if row.get("row") != "prepared" or not isinstance(allocation, Mapping):
            continue
        parsed = Allocation.model_validate(dict(allocation))
        if parsed.workspace and parsed.workspace not in found:
            found[parsed.workspace] = (parsed, str(row.get("node")))
    return found


def release_all(placer: Placer, rows: Iterable[Mapping[str, Any]]) -> None:
    """Release every worktree the run's rows name (the run has ended). One that
    cannot be released is warned about and stays (blocking: run it in a thread)."""
    for workspace, (allocation, node) in allocations(rows).items():
        if allocation.kind in (None, DIRECTORY):
            continue
        try:
            placer.release(allocation, node)
        except Exception as err:  # pygit2.GitError, OSError: the run has ended anyway
            log.warning("cannot release the worktree %s: %s", workspace, err)
