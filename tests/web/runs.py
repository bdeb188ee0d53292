"""Runs written straight into a state directory for the web view's tests: their
journals as a run's process writes them (one batch a row unless told)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from crw.engine.run.rundir import RunDir
from crw.journal.log import encode_batch, encode_body
from crw.journal.rows import UnknownRow

HOSTILE = '<script>alert("x")</script><img src=x onerror=alert(1)>&amp;'
"""Markup a node id, a call id or an answer could hold: shown as text, never run."""


def at(second: int) -> str:
    return f"2026-12-01T00:{second // 60:02d}:{second % 60:02d}.000000Z"


def write_run(
    state: Path,
    run_id: str,
    rows: list[dict[str, Any]],
    *,
    batch: int = 1,
    spec: dict[str, Any] | None = None,
) -> RunDir:
    """Run `run_id` under `state` with `rows` as its journal, `batch` rows a batch."""
    run = RunDir.of(state, run_id)
    run.create()
    run.run_json.write_text(json.dumps(spec or {"backend": "app-server"}))
    append(run, rows, batch=batch)
    return run


def append(run: RunDir, rows: list[dict[str, Any]], *, batch: int = 1) -> None:
    """Append `rows` to the run's journal, `batch` rows a batch."""
    try:
        seq = run.journal.read_bytes().count(b"\n")
    except FileNotFoundError:
        seq = 0
    with open(run.journal, "ab") as journal:
        for first in range(0, len(rows), batch):
            bodies = [
                encode_body(UnknownRow.model_validate(row)) for row in rows[first : first + batch]
            ]
            journal.write(encode_batch(seq + 1, at(seq + 1), bodies))
            seq += len(bodies)


def started(backend: str = "app-server") -> dict[str, Any]:
    return {"row": "started", "backend": backend, "pid": 1}


def call_rows(call: str, node: str, *, end: dict[str, Any] | None) -> list[dict[str, Any]]:
    """A call prepared, and ended by `end` (a row's fields past its call) if given."""
    rows: list[dict[str, Any]] = [
        {"row": "prepared", "call": call, "node": node, "role": "executor"}
    ]
    if end is not None:
        rows.append({"call": call} | end)
    return rows


COMPLETED = {"row": "completed", "result": {"summary": "done"}, "raw_text": "{}",
             "tokens": {"input": 9, "output": 3, "total": 12}}  # fmt: skip
HELD = {"row": "held", "reason": "host_failure", "error": "the subagent vanished"}
