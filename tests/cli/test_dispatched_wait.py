"""`crw flow dispatched` waits for its reply on a watch of replies/: the reply is
read when its file is renamed in, not at a poll; where replies/ cannot be watched
it looks every POLL, as it did."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from crw.bus import dirwatch
from crw.bus import inbox as inbox_module
from crw.bus.dirwatch import DirWatch
from crw.bus.inbox import Report, write_reply, write_report
from crw.cli.owner import dispatched as dispatched_module
from crw.cli.owner.dispatched import POLL, Clock, await_reply
from crw.engine.run.locks import run_lock
from crw.engine.run.rundir import RunDir


@pytest.fixture
def live(tmp_path: Path) -> Iterator[RunDir]:
    """Run r1, its run lock held (a process holds it: the wait goes on)."""
    run = RunDir.of(tmp_path / "state", "r1")
    run.create()
    with run_lock(run):
        yield run


def _report(run: RunDir) -> Report:
    report = Report.new("r1", "build.1", 1, 1, "thread-7", "2026-12-01T00:00:00Z")
    write_report(run, report)
    return report


def _bound(report: Report) -> dict[str, Any]:
    return {"id": report.id, "call": report.call, "reply": "bound", "reason": "its subagent"}


def _still() -> Clock:
    """A clock that stands still and never sleeps: only the watch can wake the wait."""

    def sleep(seconds: float) -> None:
        raise AssertionError(f"slept {seconds} s: the wait polled")

    return Clock(monotonic=lambda: 0.0, sleep=sleep)


def _counted_reads(monkeypatch: pytest.MonkeyPatch, first: Any = None) -> list[str]:
    """Count take_reply's calls; `first` runs right after the first one looked."""
    reads: list[str] = []
    take_reply = inbox_module.take_reply

    def counted(run: RunDir, report_id: str) -> dict[str, Any] | None:
        reply = take_reply(run, report_id)
        reads.append(report_id)
        if len(reads) == 1 and first is not None:
            first(run)
        return reply

    monkeypatch.setattr(dispatched_module, "take_reply", counted)
    return reads


@pytest.mark.timeout(30)
def test_a_reply_written_after_the_first_look_is_read_at_once_with_the_clock_still(
    live: RunDir, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: CMD-DISP-3. The reply is written after the wait's first look found
    none; the clock stands still and sleeps never, so only its arrival in replies/
    wakes the wait: two reads in all, no poll."""
    report = _report(live)
    reads = _counted_reads(monkeypatch, lambda run: write_reply(run, _bound(report)))
    reply = await_reply(live, report, 60.0, _still())
    assert reply["reply"] == "bound" and reply["id"] == report.id
    assert reads == [report.id, report.id]


@pytest.mark.timeout(30)
def test_the_reply_it_prints_is_removed_and_another_reports_stays(live: RunDir) -> None:
    """spec: DISP-2. `dispatched` takes the reply it waited for: once read, its file
    is gone (only the `dispatched` that wrote the report reads it), so a long
    run's replies do not pile up to be removed at its end; the reply to another
    report stays where its own `dispatched` will read it."""
    mine, other = _report(live), _report(live)
    write_reply(live, _bound(other))
    write_reply(live, _bound(mine))
    reply = await_reply(live, mine, 60.0, _still())
    assert reply["reply"] == "bound" and reply["id"] == mine.id
    assert os.listdir(live.replies) == [f"{other.id}.json"]


@pytest.mark.timeout(30)
def test_another_reports_reply_does_not_make_the_wait_read(
    live: RunDir, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: CMD-DISP-3. Several `dispatched` wait on one run: a reply to another
    report wakes the wait, which reads nothing for it; its own reply is read once."""
    report, other = _report(live), _report(live)
    reads = _counted_reads(monkeypatch, lambda run: write_reply(run, _bound(other)))
    woken: list[frozenset[str] | None] = []
    arrivals = DirWatch.arrivals

    def second_brings_the_reply(self: DirWatch, seconds: float) -> frozenset[str] | None:
        if woken:  # the first wake was the other report's reply
            write_reply(live, _bound(report))
        woken.append(arrivals(self, seconds))
        return woken[-1]

    monkeypatch.setattr(DirWatch, "arrivals", second_brings_the_reply)
    reply = await_reply(live, report, 60.0, _still())
    assert reply["id"] == report.id
    assert woken == [frozenset({f"{other.id}.json"}), frozenset({f"{report.id}.json"})]
    assert reads == [report.id, report.id]


def test_without_a_watch_it_looks_every_poll(live: RunDir, monkeypatch: pytest.MonkeyPatch) -> None:
    """spec: CMD-DISP-3. Where replies/ cannot be watched (no inotify) the wait
    looks every POLL; the reply written at the third sleep is read at the fourth
    look."""
    monkeypatch.setattr(dirwatch, "_inotify", lambda: None)
    assert DirWatch.open(live.replies) is None
    report = _report(live)
    reads = _counted_reads(monkeypatch)
    now = [0.0]
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds
        if len(slept) == 3:
            write_reply(live, _bound(report))

    reply = await_reply(live, report, 60.0, Clock(monotonic=lambda: now[0], sleep=sleep))
    assert reply["reply"] == "bound"
    assert slept == [POLL, POLL, POLL] and len(reads) == 4


def test_a_watch_reports_the_names_renamed_in(tmp_path: Path) -> None:
    """spec: DISP-1. `arrivals` answers the names renamed into the directory since
    the last call (none at once when nothing came), not a temporary file's write."""
    watch = DirWatch.open(tmp_path)
    assert watch is not None
    try:
        assert watch.arrivals(0) == frozenset()
        (tmp_path / ".a.tmp").write_text("{}")
        assert watch.arrivals(0) == frozenset()
        (tmp_path / ".a.tmp").rename(tmp_path / "a.json")
        (tmp_path / ".b.tmp").write_text("{}")
        (tmp_path / ".b.tmp").rename(tmp_path / "b.json")
        assert watch.arrivals(5.0) == frozenset({"a.json", "b.json"})
        assert watch.arrivals(0) == frozenset()
    finally:
        watch.close()
    assert watch.arrivals(0) is None  # closed: look at the directory


def test_a_report_reads_the_run_from_its_snapshot_not_every_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """spec: CMD-DISP-1, CMD-DISP-7. The checks before the report and the answer
    of a run no process holds need the calls' states: they are read from the
    replay snapshot and the rows after it, never by decoding the whole journal
    (29 ms a report at 557 calls, where the snapshot's read took 2.4)."""
    from crw.engine.config.workflow import load_workflow
    from crw.engine.run.runspec import RunSpec, WorkflowRef, write_run_spec
    from crw.journal import snapshot
    from tests.cli.conftest import EXAMPLES

    workflow = EXAMPLES / "fix-issue.toml"
    run = RunDir.of(tmp_path / "state", "r1")
    run.create()
    ref = WorkflowRef(path=str(workflow), digest=load_workflow(workflow).digest)
    write_run_spec(run.run_json, RunSpec(id="r1", workflow=ref, backend="session", pool=2))
    reads: list[Path] = []
    replay_journal = snapshot.replay_journal

    def counted(journal: Path, *, live: bool = False) -> Any:
        reads.append(journal)
        return replay_journal(journal, live=live)

    def whole(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the whole journal was decoded")

    monkeypatch.setattr(dispatched_module, "replay_journal", counted)
    monkeypatch.setattr(dispatched_module, "decode", whole)
    code = dispatched_module.dispatched_command(
        "r1", "build.1", agent="thread-7", k=1, attempt=1, wait=1.0,
        state=str(tmp_path / "state"), json=True,
    )  # fmt: skip
    assert code == 1 and '"queued"' in capsys.readouterr().out
    assert reads == [run.journal, run.journal]  # the checks, then the unheld run's answer
