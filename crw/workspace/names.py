"""The names the placer decides and its git effects make: the kinds of a call's
directory P, the node ref crw.commit advances, a call's branch of the run, and a
worktree's name in the repository (`crw.workspace.placer` says what each kind is).
"""

from __future__ import annotations

from pathlib import Path

WORKTREE, CHECKOUT, SCRATCH, DIRECTORY = "worktree", "checkout", "scratch", "directory"


def node_ref(run_id: str, node: str) -> str:
    """The node's branch, which crw.commit advances."""
    return f"refs/crw/flow/{run_id}/nodes/{node}"


def branch_of(run_id: str, call: str) -> str:
    """The run's branch of a call's worktree."""
    return f"refs/heads/crw/{run_id}/{call}"


def worktree_name(run_id: str, workspace: Path) -> str:
    """The worktree's name in the repository (`.git/worktrees/<name>`): unique per
    run and P (a fix round shares its build call's P, so its worktree)."""
    return f"crw-{run_id}-{workspace.name}"
