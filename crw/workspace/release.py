"""A run's worktrees released as its files say: run.json's repository and head, and
the allocations its journal's prepared rows record.

The run process calls `release_run` after its ended row; `crw flow rm` and `gc`
call it before they remove a run's directory, so no worktree record of the
repository is left pointing into a directory that is gone. Blocking functions.
"""

from __future__ import annotations

import logging

from crw.engine.rundir import RunDir
from crw.engine.runspec import RunSpec, read_run_spec
from crw.errors import CrwError
from crw.journal.log import read_journal
from crw.workspace.placer import Placer, release_all

log = logging.getLogger("crw.workspace")


def placer_of(spec: RunSpec, run: RunDir) -> Placer | None:
    """The run's placer, from run.json's repository and head (a run started without
    them, or outside any checkout, works in plain directories: None)."""
    if spec.repository is None or spec.head is None:
        return None
    return Placer(spec.id, spec.repository, spec.head, run.calls)


def release_run(run: RunDir, spec: RunSpec | None = None) -> None:
    """Release every worktree of `run` its rows name. A run whose files cannot be
    read is warned about and left as it is."""
    try:
        spec = spec if spec is not None else read_run_spec(run.run_json)
        placer = placer_of(spec, run)
        if placer is None:
            return
        rows = read_journal(run.journal).rows
    except (CrwError, OSError) as err:
        log.warning("cannot release the worktrees of %s: %s", run.root, err)
        return
    release_all(placer, rows)
