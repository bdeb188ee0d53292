"""The inbox reads a report when it arrives, not at its next poll: every report
the owner writes is on the path of the reply it waits for, once a call."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio
from trio.testing import MockClock

from crw.actors.inbox import SWEEP_POLLS, Inbox
from crw.bus import inbox as files
from crw.bus.dirwatch import DirWatch
from crw.bus.inbox import Report, write_report
from crw.engine.run.rundir import RunDir
from crw.settings import DEFAULT_SETTINGS, Settings

FAR = 1000.0
"""An inbox poll the test's clock never reaches (it stands still)."""


async def no_answer(report: Report) -> None:
    """A run that answers no report itself (every report waits for its call)."""


@pytest.mark.timeout(30)
async def test_a_report_is_handed_out_when_it_arrives_without_waiting_for_a_poll(
    tmp_path: Path, mock_clock: MockClock
) -> None:
    """spec: DISP-1. The clock stands still, so the inbox's poll never comes round
    again after its first read: only the report's arrival in inbox/ wakes the read
    that hands it to its call."""
    run = RunDir.of(tmp_path / "state", "r1")
    run.create()
    inbox = Inbox(run, "r1", Settings(inbox_poll=FAR), no_answer)
    with inbox.subscribe("build.1") as reports:
        async with trio.open_nursery() as nursery:
            await nursery.start(inbox.run)
            await trio.testing.wait_all_tasks_blocked()  # the first read found nothing
            for n in range(3):
                report = Report.new("r1", "build.1", 1, 1, f"thread-{n}", "2026-01-01T00:00:00Z")
                write_report(run, report)
                assert await reports.receive() == report
            assert trio.current_time() == 0
            nursery.cancel_scope.cancel()


async def test_the_watch_wakes_at_a_rename_and_is_none_without_a_directory(tmp_path: Path) -> None:
    """spec: DISP-1. A rename into the directory wakes a wait at once; with no
    directory to watch there is no watch, and the inbox polls as it did (its
    listing finds the reports either way)."""
    assert DirWatch.open(tmp_path / "missing") is None
    watch = DirWatch.open(tmp_path)
    assert watch is not None
    with trio.move_on_after(0.01) as waited:
        await watch.wait(5.0)
    assert waited.cancelled_caught  # nothing arrived: it waits its time
    (tmp_path / ".x.tmp").write_text("{}")
    (tmp_path / ".x.tmp").rename(tmp_path / "x.json")
    with trio.fail_after(5):
        await watch.wait(5.0)  # the rename wakes it at once
    watch.close()


async def test_an_idle_inbox_is_listed_every_sweep_not_every_poll(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: DISP-1. While no report waits, the watch wakes the inbox for the next
    one: it lists inbox/ once every SWEEP_POLLS polls' time, not every poll (each
    listing waits on the renames and unlinks the run and its owner make there)."""
    run = RunDir.of(tmp_path / "state", "r1")
    run.create()
    listings: list[int] = []
    read_reports = files.read_reports

    def counted(*args: Any, **kwargs: Any) -> list[Report]:
        listings.append(1)
        return read_reports(*args, **kwargs)

    monkeypatch.setattr(files, "read_reports", counted)
    inbox = Inbox(run, "r1", DEFAULT_SETTINGS, no_answer)
    async with trio.open_nursery() as nursery:
        await nursery.start(inbox.run)
        await trio.sleep(1.0)
        nursery.cancel_scope.cancel()
    assert 1.0 / (SWEEP_POLLS * DEFAULT_SETTINGS.inbox_poll) <= len(listings) <= 12


async def test_a_report_no_call_takes_yet_is_read_again_every_poll(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: DISP-1. A report whose call does not wait on it yet stays in the inbox
    and is read again every `inbox_poll`, so its call gets it within a poll of
    subscribing, as before the watch."""
    run = RunDir.of(tmp_path / "state", "r1")
    run.create()
    inbox = Inbox(run, "r1", DEFAULT_SETTINGS, no_answer)
    async with trio.open_nursery() as nursery:
        await nursery.start(inbox.run)
        report = Report.new("r1", "build.1", 1, 1, "thread-1", "2026-01-01T00:00:00Z")
        write_report(run, report)
        await trio.sleep(0.5)  # read, and left: no call waits on it
        with (
            inbox.subscribe("build.1") as reports,
            trio.fail_after(1.5 * DEFAULT_SETTINGS.inbox_poll),
        ):
            assert await reports.receive() == report
        nursery.cancel_scope.cancel()
