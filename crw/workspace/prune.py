"""The refs of runs that no longer exist: `refs/crw/flow/<run>/…` whose run has no
directory in the state any more (`crw flow gc --refs`).

A run's node branches and stray refs are its result and outlive it: removing a
run's directory (`rm`, `gc`) never touches them. Nothing else lists or prunes
them, so they pile up in the repository. Here they are listed (`run_refs`),
judged against the runs that exist (`stale`, pure), and deleted one by one with
the value they were listed at as the compare-and-swap's old value (`refs.remove`):
a ref that moved since it was listed is left as it is. The refs are listed
before the runs are, so a run that starts in between (a new id, no ref yet) is
never judged gone.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path

import pygit2

from crw.workspace.refs import ROOT, RefLocked, SwapFailed, common, remove


@dataclass(frozen=True)
class RunRef:
    """One ref under `refs/crw/flow/`: its run, its name and the commit it holds."""

    run: str
    name: str
    commit: str


def open_checkout(root: Path) -> pygit2.Repository:
    """The repository of the checkout at `root`; for a linked worktree its common
    repository, which holds the shared refs."""
    return common(pygit2.Repository(str(root)), ROOT)


def run_refs(repo: pygit2.Repository) -> list[RunRef]:
    """Every ref under `refs/crw/flow/<run>/`, sorted by name."""
    found = []
    for name in sorted(repo.references):
        if not name.startswith(f"{ROOT}/"):
            continue
        run = name[len(ROOT) + 1 :].partition("/")[0]
        ref = repo.references.get(name)
        if ref is None or not run:
            continue
        found.append(RunRef(run, name, str(ref.resolve().target)))
    return found


def stale(refs: Sequence[RunRef], runs: Collection[str]) -> list[RunRef]:
    """The refs whose run is not among `runs` (the runs that exist)."""
    return [ref for ref in refs if ref.run not in runs]


def delete(repo: pygit2.Repository, ref: RunRef) -> str | None:
    """Delete `ref` if it still holds the commit it was listed at; None, or why it
    was left."""
    try:
        remove(repo, ref.name, ref.commit)
    except SwapFailed as err:
        return f"{ref.name} moved since it was listed (it holds {err.found or 'nothing'}); left"
    except RefLocked:
        return (
            f"{ref.name} stays locked ({Path(repo.path) / ref.name}.lock); left: if no git "
            "command is running on the repository, remove that file and run gc again"
        )
    except pygit2.GitError as err:
        return f"{ref.name} cannot be deleted ({err}); left"
    return None
