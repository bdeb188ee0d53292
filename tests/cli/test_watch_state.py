"""`crw flow watch`'s view of a run no process holds: `crashed` only when no row
is left to read (a process writes its last rows, a paused row say, before it lets
its locks go, and the view may not have read them yet)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from crw.cli.read.follow import JournalTail
from crw.cli.read.watch import WatchView
from crw.engine.run.rundir import RunDir
from crw.journal.log import encode_batch, encode_body
from crw.journal.rows import UnknownRow


def _append(run: RunDir, seq: int, row: dict[str, Any]) -> None:
    body = encode_body(UnknownRow.model_validate(row))
    with open(run.journal, "ab") as journal:
        journal.write(encode_batch(seq, f"2026-12-06T10:00:0{seq}.000000Z", [body]))


def test_a_run_whose_last_rows_are_not_read_yet_is_not_crashed(tmp_path: Path) -> None:
    run = RunDir.of(tmp_path, "r-20261206-100000-abcd")
    run.create()
    _append(run, 1, {"row": "started", "backend": "session"})
    _append(run, 2, {"row": "prepared", "call": "a.1", "node": "a", "role": "explorer"})
    tail = JournalTail(run.journal)
    tail.read()
    view = WatchView(run, tail, {"a": 1})
    now = datetime.now(UTC)
    assert view.payload(now)["state"] == "crashed"  # no process, nothing more to read
    _append(run, 3, {"row": "paused", "reason": "paused"})  # written before the lock went
    assert view.payload(now)["state"] == "running"  # not read yet: not crashed
    tail.read()
    paused = view.payload(now)
    assert (paused["state"], paused["in_flight"]) == ("paused", [])
