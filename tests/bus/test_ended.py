"""What an ended run's bus keeps: the reports no process answered, not the
handled ones nor the replies."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from crw.bus.ended import clean_ended
from crw.engine.run.rundir import RunDir


def test_the_end_removes_the_handled_reports_and_the_replies_by_one_listing_each(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: DISP-1: a report with a reply is handled and goes, a temporary file
    goes, an unanswered report stays; every reply goes. Which reports are handled
    is read from one listing of replies/, not a stat a report (a thousand at the
    end of a run of a thousand calls)."""
    run = RunDir.of(tmp_path / "state", "r1")
    run.create()
    for name in ("a.json", "b.json", ".c.tmp", "left.json"):
        (run.inbox / name).write_text("{}")
    for name in ("a.json", "b.json", ".d.tmp"):
        (run.replies / name).write_text("{}")
    looked: list[Any] = []
    stat = os.stat

    def count_stat(path: Any, *args: Any, **kwargs: Any) -> Any:
        looked.append(path)
        return stat(path, *args, **kwargs)

    monkeypatch.setattr(os, "stat", count_stat)
    clean_ended(run)
    assert sorted(os.listdir(run.inbox)) == ["left.json"]
    assert os.listdir(run.replies) == []
    assert [p for p in looked if str(run.replies) in str(p)] == []
