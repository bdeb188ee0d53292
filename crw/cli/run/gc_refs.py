"""`crw flow gc --refs`: the refs `refs/crw/flow/<run>/…` of runs that no longer
exist in the state directory, listed, and deleted only with `--yes`.

The repository is `--repo PATH`, else the checkout that holds the state
directory (where `crw flow start` puts `.crw/`); a state directory in no
checkout and no `--repo` is refused in one line. A run exists while its
directory is under `<state>/flow` (a start's directory without run.json too);
the runs this gc removes, or with --dry-run would remove, count as gone. A ref
of a run that exists is never deleted. Another state directory's runs that
share the repository are not seen: the listing, which is what a run without
`--yes` prints, is what to check first.
"""

from __future__ import annotations

import shlex
from collections.abc import Collection
from pathlib import Path
from typing import Any

from crw.engine.config.repo import checkout_root
from crw.engine.run.rundir import list_runs
from crw.errors import InputError
from crw.workspace.prune import delete, open_checkout, run_refs, stale

REMOVED_PREFIX = ".removed-"


def refs_repository(state_dir: Path, repo: str | None) -> Path:
    """The checkout whose refs `gc --refs` prunes.

    Raises:
        InputError: `--repo` names no checkout, or the state directory is in none.
    """
    if repo is not None:
        root = checkout_root(Path(repo)) if Path(repo).is_dir() else None
        if root is None:
            raise InputError(f"--repo {shlex.quote(repo)} is no git checkout; give the path of one")
        return root
    root = checkout_root(state_dir)
    if root is None:
        raise InputError(
            f"the state directory {state_dir} is in no git checkout, so gc --refs has no "
            "repository to prune; name it with --repo PATH"
        )
    return root


def prune_refs(
    state_dir: Path, root: Path, *, gone: Collection[str], dry_run: bool
) -> dict[str, Any]:
    """List the refs of runs that no longer exist under `state_dir` (and of the runs
    in `gone`) in the checkout at `root`, and delete them unless `dry_run`."""
    repo = open_checkout(root)
    listed = run_refs(repo)  # before the runs: a run that starts now has no ref yet
    runs = {run for run in list_runs(state_dir) if not run.startswith(REMOVED_PREFIX)}
    found = stale(listed, runs - set(gone))
    deleted, skipped = [], []
    for ref in found:
        why = None if dry_run else delete(repo, ref)
        if why is None:
            deleted.append({"run": ref.run, "ref": ref.name, "commit": ref.commit})
        else:
            skipped.append({"run": ref.run, "ref": ref.name, "reason": why})
    return {
        "repository": str(root),
        "dry_run": dry_run,
        "deleted": deleted,
        "skipped": skipped,
        "kept": len(listed) - len(found),
    }


def refs_lines(refs: dict[str, Any], again: str) -> list[str]:
    """The human lines of a prune: each ref, then a summary with what to do."""
    verb = "would delete" if refs["dry_run"] else "deleted"
    lines = [f"{verb} {r['ref']} (run {r['run']}, at {r['commit'][:12]})" for r in refs["deleted"]]
    lines += [f"left: {s['reason']}" for s in refs["skipped"]]
    runs = len({r["run"] for r in refs["deleted"]})
    done = "would be deleted from" if refs["dry_run"] else "deleted from"
    summary = (
        f"gc --refs: {len(refs['deleted'])} ref(s) of {runs} run(s) that no longer exist "
        f"{done} {refs['repository']}; {refs['kept']} ref(s) of runs that exist kept"
    )
    if refs["dry_run"] and refs["deleted"]:
        summary += f"; delete them with: {again}"
    return [*lines, summary]
