"""What every end of a run does, once the row that ends it is durable.

A run ends by its process (after its ended row), by `crw flow cancel` of a run
no process holds (after its cancelled and ended rows) or by `crw flow answer
--abort` (after its decision row). Each ends it by `end_run`, in one order: the
owner's orchestrator line closed (CloseOrchestrator: the line is closed when the
run ends, BIND-LINE-13, CMD-RESUME-8), the bus cleaned of what the ended run
left, and what the run holds in the checkout released (`release_run`, the one
release path). Each part does nothing the second time, so a command said again
finishes an end a crash cut short. Blocking: the run's process calls it from a
worker thread.
"""

from __future__ import annotations

import logging
from pathlib import Path

from crw.binding.owner import close_owner
from crw.bus.ended import clean_ended
from crw.engine.run.rundir import RunDir
from crw.engine.run.runspec import RunSpec
from crw.workspace.release import release_run

log = logging.getLogger("crw.run_end")


def end_run(run: RunDir, state: Path, spec: RunSpec, *, records: bool = True) -> None:
    """End `run`, whose ending row is durable, under its run lock. `records` False:
    the run has no evidence cwd (`release_run`). A line that cannot be closed is a
    warning: the next start on the owner thread closes it (BIND-LINE-21)."""
    if spec.owner:
        warning = close_owner(state, spec.owner, spec.id)
        if warning is not None:
            log.warning("%s", warning)
    clean_ended(run)
    release_run(run, spec, records=records)
