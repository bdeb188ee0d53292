"""The timeline read from the snapshot of its fold and the rows after it: the very
picture the whole journal draws, byte for byte, however the journal grew between
the reads; a snapshot that is not the journal's is never taken."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from crw.cli.read import timeline_read
from crw.cli.read.timeline import render_svg
from crw.engine.run.rundir import RunDir
from crw.engine.views.timeline import layout, layout_tracks
from crw.journal import snapshot
from crw.journal.log import read_journal
from tests.cli.test_timeline_layout import journal
from tests.web.runs import COMPLETED, HELD, append, call_rows, started, write_run

RUN = "chain-20261201-000000-aaaa"
NOW = datetime(2026, 12, 1, 0, 30, tzinfo=UTC)


def several_calls() -> list[dict[str, Any]]:
    rows = [started()]
    for n in range(1, 8):
        rows += call_rows(f"build.{n}", "build", end=None)
    for n in range(1, 8):
        rows.append({"call": f"build.{n}"} | COMPLETED)
    return [*rows, {"row": "ended", "status": "completed"}]


def held_and_repaired() -> list[dict[str, Any]]:
    """The layout test's journal (a lost attempt, a repair on the open subagent,
    a call paused mid-turn and held, a review that rejects), then the held call
    answered retry and completed, and a call held host_failure."""
    rows = [{k: v for k, v in row.items() if k != "at"} for row in journal()][:-1]
    return [
        *rows,
        {"row": "decision", "call": "work.1", "choice": "retry"},
        {"row": "step_published", "call": "work.1", "k": 2, "attempt": 1, "repair": True}
        | {"call_tokens": {"input": 5, "total": 5}},
        {"row": "turn_started", "call": "work.1", "k": 2, "attempt": 1},
        {"call": "work.1"} | COMPLETED,
        *call_rows("fix.1", "fix", end=HELD),
    ]


def whole(run: RunDir, now: datetime | None) -> str:
    """The picture as the whole journal draws it."""
    return render_svg(layout(read_journal(run.journal).rows, run=run.id, now=now))


def kept(run: RunDir, now: datetime | None) -> str:
    """The picture from the fold's snapshot and the rows after it."""
    read = timeline_read.read_tracks(run, now=now, live=False)
    return render_svg(layout_tracks(read, run=run.id))


@pytest.mark.parametrize("rows", [several_calls(), held_and_repaired()], ids=["calls", "held"])
@pytest.mark.parametrize("now", [None, NOW], ids=["ended", "live"])
def test_the_timeline_from_its_snapshot_is_the_whole_journals_to_the_byte(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    rows: list[dict[str, Any]],
    now: datetime | None,
) -> None:
    """Each read leaves a snapshot of the fold (the refresh share at a byte) and the
    next one folds on from it: after every row appended, the picture is the one
    the whole journal draws."""
    monkeypatch.setattr(snapshot, "REFRESH_BYTES", 1)
    run = write_run(tmp_path / "state", RUN, rows[:1])
    for row in rows[1:]:
        append(run, [row])
        assert kept(run, now) == whole(run, now)
        assert (run.root / timeline_read.TIMELINE_SNAPSHOT).exists()


def test_a_read_decodes_only_the_rows_after_the_snapshot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = held_and_repaired()
    run = write_run(tmp_path / "state", RUN, rows[:-3])
    monkeypatch.setattr(snapshot, "REFRESH_BYTES", 1)
    kept(run, None)  # leaves the snapshot
    before = run.journal.stat().st_size
    append(run, rows[-3:])
    decoded: list[int] = []
    from crw.journal.log import decode as real

    def counted(data: bytes, path: Path, *, after: int = 0) -> Any:
        decoded.append(len(data))
        return real(data, path, after=after)

    monkeypatch.setattr(timeline_read, "decode", counted)
    assert kept(run, None) == whole(run, None)
    assert decoded == [run.journal.stat().st_size - before]


@pytest.mark.parametrize("fault", ["damaged", "another journal's", "beyond the journal"])
def test_a_snapshot_that_is_not_the_journals_is_not_taken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fault: str
) -> None:
    monkeypatch.setattr(snapshot, "REFRESH_BYTES", 1)
    run = write_run(tmp_path / "state", RUN, held_and_repaired())
    other = write_run(tmp_path / "other", RUN, several_calls())
    kept(other, None)
    kept(run, None)
    path = run.root / timeline_read.TIMELINE_SNAPSHOT
    if fault == "damaged":
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0xFF
        path.write_bytes(bytes(data))
    elif fault == "another journal's":
        path.write_bytes((other.root / timeline_read.TIMELINE_SNAPSHOT).read_bytes())
    else:
        run.journal.write_bytes(b"")
        append(run, held_and_repaired()[:5])
    assert kept(run, None) == whole(run, None)
