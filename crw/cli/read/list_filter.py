"""The filters of `crw flow list`: `--status`, `--workflow`, `--since`, `--limit`.

Each narrows the runs the others leave, in any combination:

- `--status S` (repeatable, or `S,T`): a run whose state is S (`running`,
  `paused`, `ended`, ...), or an ended run whose status is S (`completed`,
  `failed`, `aborted`, `cancelled`);
- `--workflow W`: a run of the workflow named W (the run id's head), or of the
  workflow file W (a path, from the current directory); judged from run.json
  alone, before the run's journal is read;
- `--since WHEN`: a run started at WHEN or later (its first started row; a run
  with none yet, by the time its id carries); WHEN a date or time, or an age
  (`2h`: two hours before now). `--since` replaces the default window that
  leaves out the ended runs older than 7 days;
- `--limit N`: the newest N of what the others leave.

A bad value is refused in one line before any run is read. Pure but for the
path `--workflow` names, made absolute; standard library only.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from crw.cli.when import when
from crw.errors import InputError

STATES = (
    "starting",
    "running",
    "waiting_session",
    "waiting_decision",
    "paused",
    "ended",
    "crashed",
    "corrupt",
    "unreadable",
)
"""The states a run is listed in."""
ENDED = ("completed", "failed", "aborted", "cancelled")
"""The statuses an ended run ends with."""


@dataclass(frozen=True)
class Filters:
    """What `list` keeps; each None or empty keeps every run."""

    statuses: frozenset[str] = frozenset()
    workflow: str | None = None
    workflow_path: str | None = None
    since: datetime | None = None
    limit: int | None = None

    def of_workflow(self, name: str | None, file: str | None) -> bool:
        """Whether a run of workflow `name`, from file `file`, passes --workflow."""
        if self.workflow is None:
            return True
        return self.workflow in (name, file) or (file is not None and file == self.workflow_path)

    def keeps(self, entry: dict[str, Any]) -> bool:
        """Whether a listed run (its entry) passes --status and --since."""
        if self.statuses and not (
            entry["state"] in self.statuses
            or (entry["state"] == "ended" and entry["reason"] in self.statuses)
        ):
            return False
        if self.since is None:
            return True
        started = _started(entry)
        return started is None or started >= self.since


def list_filters(
    status: Sequence[str],
    workflow: str | None,
    since: str | None,
    limit: int | None,
    now: datetime,
    cwd: Path,
) -> Filters:
    """The filters the command line gives.

    Raises:
        InputError: a state that is none, an empty workflow, a WHEN that is no
            time, a limit under 1.
    """
    statuses = frozenset(s.strip() for given in status for s in given.split(","))
    unknown = sorted(statuses - set(STATES) - set(ENDED))
    if unknown:
        raise InputError(
            f"--status {json.dumps(unknown[0])} is no run state; pass one of "
            f"{', '.join(STATES)}, or an ended run's status: {', '.join(ENDED)}"
        )
    if workflow is not None and not workflow.strip():
        raise InputError(
            "--workflow is empty; pass a workflow's name (a run id's head) or its file"
        )
    if limit is not None and limit < 1:
        raise InputError(f"--limit {limit} lists nothing; pass a number of runs, 1 or more")
    path = str((cwd / workflow).absolute()) if workflow else None
    return Filters(
        statuses=statuses,
        workflow=workflow,
        workflow_path=path,
        since=when("--since", since, now) if since is not None else None,
        limit=limit,
    )


def _started(entry: dict[str, Any]) -> datetime | None:
    """When the run started: its first started row, else the time its id carries
    (`<workflow>-YYYYMMDD-HHMMSS-xxxx`, UTC), else None."""
    at = entry.get("started_at")
    if at:
        try:
            return datetime.fromisoformat(at)
        except ValueError:
            pass
    _, *stamp = str(entry["run"]).rsplit("-", 3)
    try:
        return datetime.strptime("".join(stamp[:2]), "%Y%m%d%H%M%S").replace(tzinfo=UTC)
    except ValueError:
        return None
