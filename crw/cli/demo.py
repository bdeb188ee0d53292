"""`crw flow demo`: the best end-to-end run that exists, and what it shows.

Today that is the foundation: the demo workflow is validated, a session run is
recorded (run.json with its TMPDIR), the owner is bound, the detached run process
takes its locks and commits its started row, and the run is read back through
replay. The simulated host and the owner loop that carry the calls to completion
land with the host and session-call issues; the demo says so rather than pretend.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from crw.cli.output import emit
from crw.cli.start import start_run
from crw.cli.status import status_payload
from crw.errors import InputError
from crw.journal.log import read_journal
from crw.journal.replay import replay

DEMO_OWNER = "demo-owner-thread"


def demo_workflow() -> Path:
    """examples/demo.toml of the source tree crw runs from."""
    path = Path(__file__).resolve().parents[2] / "examples" / "demo.toml"
    if not path.is_file():
        raise InputError(f"the demo workflow {path} is missing; run the demo from a crw checkout")
    return path


def demo_command(*, state: str | None, json: bool) -> int:
    state_dir = Path(state) if state else Path(tempfile.mkdtemp(prefix="crw-demo-"))
    outcome = start_run(
        demo_workflow(),
        backend="session",
        owner=DEMO_OWNER,
        host=f"unix:{state_dir / 'host.sock'}",
        state=str(state_dir),
        environ=os.environ,
    )
    run_state = replay(read_journal(outcome.run.journal).rows)
    payload: dict[str, Any] = status_payload(outcome.spec.id, run_state)
    payload |= {"run_dir": str(outcome.run.root), "pid": outcome.pid, "warnings": outcome.warnings}
    started = next(row for row in read_journal(outcome.run.journal).rows if row["row"] == "started")
    lines = [
        f"crw flow demo: workflow {demo_workflow().name}, state {state_dir}",
        f"  run {outcome.spec.id}: {outcome.spec.backend} backend, pool {outcome.spec.pool}, "
        f"owner {outcome.spec.owner}",
        f"  run.json records TMPDIR={outcome.spec.env.TMPDIR if outcome.spec.env else '-'}",
        f"  run process {started.get('pid')} held process lock {started.get('process')} and "
        f"committed row {started['seq']}: started (policy {started.get('policy_digest')})",
        f"  state read back: {run_state.state}",
        "",
        "This is the foundation's end-to-end path. The simulated host and the owner loop",
        "that take every call to completed arrive with the host and session-call issues.",
    ]
    emit(json, payload, "\n".join(lines))
    return 0
