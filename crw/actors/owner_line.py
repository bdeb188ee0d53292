"""The run process's side of the owner's orchestrator line.

While a process holds a session run it is the one party that writes the owner's
line (BIND-LINE-10): right after its started row is durable in the journal it
binds the owner again with the table that row pinned, when that line is not the
owner's last already (BIND-LINE-11; a start bound it before the process existed,
an earlier process may have bound another table, or nobody did); and when the
run ends it closes the line (CloseOrchestrator, BIND-LINE-13), as every end of a
run does (`crw.actors.run_end`). The foreground
`crw flow resume RUN` is such a process too (BIND-LINE-12, CMD-RESUME-7, -8).

The flow-bound file is read and appended under the flow-bound directory's lock
(`crw.binding.owner`), blocking file I/O: it runs in a worker thread, so the run's
loop never waits on it. A binding that cannot be written, or a thread another
live run holds, is a warning in the process's log; the run goes on (BIND-LINE-24).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from functools import partial
from pathlib import Path
from typing import Any

import trio

from crw.binding.owner import bind_owner, orchestrator_line
from crw.engine.run.locks import run_is_live
from crw.engine.run.rundir import RunDir

log = logging.getLogger("crw.owner_line")


async def bind_started(
    state: Path, owner: str | None, run_id: str, started: Mapping[str, Any]
) -> None:
    """Bind `owner` to the run by the pins of its `started` row, which is durable
    (intent before effect). A run without an owner binds nothing."""
    if not owner:
        return
    line = orchestrator_line(run_id, started["role_pairs"], started["policy_digest"])
    result = await trio.to_thread.run_sync(bind_owner, state, owner, line, partial(_is_live, state))
    if result.warning is not None:
        log.warning("%s", result.warning)


def _is_live(state: Path, run_id: str) -> bool:
    return run_is_live(RunDir.of(state, run_id))
