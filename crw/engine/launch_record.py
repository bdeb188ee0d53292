"""The record of a launch whose process stopped before its started row.

A detached launch (`crw.engine.launch`) waits for its process's started row; a
process that exits without one (its workflow changed since the run started, its
role store refuses a fix effort, it crashed on the way up) leaves the run with no
process and no row that says why. The command that launched it writes what the
process said, with its pid, to `launch-failed.json` in the run's directory, so
`status` and `next` can say it while no process holds the run. It is no row of
the journal (only the run's process and the commands the spec names write those),
and the next process that records its started row removes it.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import asdict, dataclass

from crw.engine.rundir import RunDir
from crw.private import write_atomic


@dataclass(frozen=True)
class LaunchFailure:
    """A launched process that stopped before its started row: its `pid`, the
    line it gave (`reason`: what and how to fix it) and when it was seen (`at`)."""

    pid: int
    reason: str
    at: str

    def to_json(self) -> dict[str, object]:
        return asdict(self)


def record_failure(run: RunDir, failure: LaunchFailure) -> None:
    """Keep `failure` as the run's last failed launch (best effort: a record that
    cannot be written leaves the launcher's own report the only one)."""
    with contextlib.suppress(OSError):
        write_atomic(run.launch_failed, json.dumps(failure.to_json()).encode(), durable=False)


def read_failure(run: RunDir) -> LaunchFailure | None:
    """The run's last failed launch, or None (none, or a record not readable)."""
    try:
        data = json.loads(run.launch_failed.read_bytes())
        return LaunchFailure(pid=int(data["pid"]), reason=str(data["reason"]), at=str(data["at"]))
    except (OSError, ValueError, TypeError, KeyError):
        return None


def clear_failure(run: RunDir) -> None:
    """Remove the record: a process of the run has recorded its started row."""
    with contextlib.suppress(OSError):
        run.launch_failed.unlink(missing_ok=True)
