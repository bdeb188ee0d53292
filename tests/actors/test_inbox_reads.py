"""What one read of the inbox costs: each report's file is read until it is handed out."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
from trio.testing import MockClock

from crw.actors.inbox import Inbox
from crw.bus import inbox as files
from crw.bus.inbox import Report, write_report
from crw.engine.run.rundir import RunDir
from crw.settings import DEFAULT_SETTINGS
from tests.actors.spies import names_read


async def no_answer(report: Report) -> None:
    """A run that answers no report itself (every report waits for its call)."""


async def test_a_report_handed_out_is_not_read_again_while_its_call_holds_it(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: DISP-1: the inbox hands each report to the call that waits on it once;
    while the call works on it (a host read, a commit) the report stays in the inbox,
    and the next reads (every 10 ms) open only the reports not handed out: one file
    read a report, not one a read."""
    run = RunDir.of(tmp_path / "state", "r1")
    run.create()
    read = names_read(monkeypatch, files, "read_bytes")
    inbox = Inbox(run, "r1", DEFAULT_SETTINGS, no_answer)
    with inbox.subscribe("build.1") as reports:
        first = Report.new("r1", "build.1", 1, 1, "thread-1", "2026-01-01T00:00:00Z")
        write_report(run, first)
        await inbox.poll()
        assert reports.receive_nowait() == first
        second = Report.new("r1", "build.1", 1, 1, "thread-2", "2026-01-01T00:00:01Z")
        write_report(run, second)
        for _ in range(5):
            await inbox.poll()
            await trio.sleep(DEFAULT_SETTINGS.inbox_poll)
        assert reports.receive_nowait() == second
    assert read == [f"{first.id}.json", f"{second.id}.json"]
