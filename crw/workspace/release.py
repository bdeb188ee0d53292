"""What a run holds in the user's checkout, released as its files say: run.json's
repository and head, and what its journal's rows name (the allocations of its
prepared rows, the copies of its flow evidence records).

Every way a run ends releases the same things, by `release_run`, once the row
that ends it is durable (intent before effect): the run process after its ended
row; `crw flow answer --abort` after the decision row; `crw flow cancel` of a run
no process holds after its cancelled and ended rows. `crw flow rm` and `gc` call
it again before they remove a run's directory, so what a release cut short by a
crash left (or what a run removed before it ended holds) is released then: no
worktree record of the repository is left pointing into a directory that is gone,
and no record is left in a checkout. Releasing twice is releasing once. Blocking
functions.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from crw.engine.run.rundir import RunDir
from crw.engine.run.runspec import RunSpec, read_run_spec
from crw.errors import CrwError
from crw.journal.stores import read_run_journal
from crw.workspace import evidence
from crw.workspace.placer import Placer, release_all

log = logging.getLogger("crw.workspace")


def placer_of(spec: RunSpec, run: RunDir) -> Placer | None:
    """The run's placer, from run.json's repository and head (a run started without
    them, or outside any checkout, works in plain directories: None)."""
    if spec.repository is None or spec.head is None:
        return None
    return Placer(spec.id, spec.repository, spec.head, run.calls)


def release_run(run: RunDir, spec: RunSpec | None = None, *, records: bool = True) -> None:
    """Release what `run` holds as its rows name it (`release`). `records` False:
    the run has no evidence cwd, so a run without a repository reads no row. A run
    whose files cannot be read is warned about and left as it is."""
    try:
        spec = spec if spec is not None else read_run_spec(run.run_json)
        placer = placer_of(spec, run)
        if placer is None and not records:
            return
        rows = read_run_journal(run.journal).rows
    except (CrwError, OSError) as err:
        log.warning("cannot release what run %s holds in the checkout: %s", run.id, err)
        return
    release(spec.id, placer, rows)


def release(run_id: str, placer: Placer | None, rows: Sequence[Mapping[str, Any]]) -> None:
    """Remove every copy of a flow evidence record the rows name, of every call
    (and the directories left empty), then release every worktree they name with
    `placer` (docs/workspaces.md, Release): its directory, the repository's record
    of it, and its branch when that holds no commit of its own. Node branches and
    stray refs stay, and so does what cannot be removed (a worktree is warned
    about)."""
    for path in evidence.run_copies(rows, run_id):
        evidence.remove_record(path)
    if placer is not None:
        release_all(placer, rows)
