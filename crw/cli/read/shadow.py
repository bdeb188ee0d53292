"""`crw flow shadow RUN [--json]`: replay a run from its trace and report each
point where the run's decisions, made again from the rows, differ from them.

It reads the run directory alone (run.json, journal.jsonl, the workflow run.json
names, the rollout files thread_started rows name), asks no host and writes
nothing. Every line is read as it is, checksum or not, so a journal edited by hand
is replayed, and its framing damage reported beside the decisions
(`crw.engine.views.shadow`). Exit 0 equal, 1 differ, 2 input error.
"""

from __future__ import annotations

import json as json_module
import os
from dataclasses import asdict
from pathlib import Path
from typing import Any

from crw.cli.output import emit
from crw.engine.answers.outcome import read_rollout_total
from crw.engine.config.workflow import load_workflow
from crw.engine.run.rundir import find_run, resolve_state
from crw.engine.run.runspec import read_run_spec
from crw.engine.views.shadow import Report, framing_points, shadow
from crw.errors import InputError
from crw.journal.framing import whole_line
from crw.journal.result_span import with_results
from crw.journal.rows import Tokens
from crw.journal.stores import store_at

Line = tuple[int, dict[str, Any] | None, str | None]


def shadow_command(run: str, *, state: str | None, json: bool) -> int:
    run_dir = find_run(resolve_state(state, os.environ, Path.cwd()), run)
    spec = read_run_spec(run_dir.run_json)
    with spec.file_limit():
        workflow = load_workflow(Path(spec.workflow.path))
    if workflow.digest != spec.workflow.digest:
        raise InputError(
            f"run {spec.id}: the workflow {spec.workflow.path} changed since the run started "
            f"(digest {workflow.digest}, run.json records {spec.workflow.digest}); restore it "
            "as the run ran it to replay the run"
        )
    lines = read_lines(run_dir.journal)
    rows = [row for _, row, _ in lines if row is not None]
    with_results(rows)  # a result kept as a span of its message, as `decode` reads it
    report = shadow(rows, workflow, spec.pool, spec.run_settings().max_attempts, _total)
    report.points = framing_points(lines) + report.points
    payload = _payload(spec.id, report)
    emit(json, payload, lambda: _human(payload))
    return 1 if report.points else 0


def _total(path: str) -> Tokens | None:
    return read_rollout_total(Path(path))


def read_lines(journal: Path) -> list[Line]:
    """Each line of the journal: its number, its row (None: not a JSON object)
    and its framing damage (None: whole)."""
    try:
        data = store_at(journal).read_from(0)
    except OSError as err:
        raise InputError(
            f"cannot read {journal}: {err.strerror or err}; name a run whose journal exists"
        ) from err
    view = memoryview(data)
    lines: list[Line] = []
    pos = 0
    while pos < len(data):
        newline = data.find(b"\n", pos)
        end = len(data) if newline < 0 else newline
        whole = whole_line(data, view, pos, end) if newline >= 0 else "the last line has no end"
        row = whole if isinstance(whole, dict) else _lenient(data[pos:end])
        lines.append((len(lines) + 1, row, None if isinstance(whole, dict) else whole))
        pos = end + 1
    return lines


def _lenient(text: bytes) -> dict[str, Any] | None:
    try:
        value = json_module.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _payload(run_id: str, report: Report) -> dict[str, Any]:
    """The --json object: run, backend, rows, equal, points [{line, seq, call,
    check, recorded, replayed}], checked {check: decisions replayed}, given."""
    return {
        "run": run_id,
        "backend": report.backend,
        "rows": report.rows,
        "equal": not report.points,
        "points": [asdict(point) for point in report.points],
        "checked": report.checked,
        "given": list(report.given),
    }


def _human(payload: dict[str, Any]) -> str:
    checked = ", ".join(f"{name} {n}" for name, n in payload["checked"].items()) or "nothing"
    verdict = "equal" if payload["equal"] else f"{len(payload['points'])} difference(s)"
    lines = [
        f"run {payload['run']}  backend {payload['backend']}  rows {payload['rows']}: {verdict}",
        f"replayed: {checked}",
    ]
    for point in payload["points"]:
        where = f"line {point['line']}" + (f" seq {point['seq']}" if point["seq"] else "")
        call = f" {point['call']}" if point["call"] else ""
        lines.append(
            f"  {where}{call} [{point['check']}]: recorded {point['recorded']}; "
            f"replay: {point['replayed']}"
        )
    lines.append("taken as given (not in the trace):")
    lines += [f"  - {item}" for item in payload["given"]]
    return "\n".join(lines)
