"""What a run writes is the user's alone: 0700 directories and 0600 files,
whatever the umask (the run directory, its journal and log, the packets and step
files, the close steps, the dispatch reports and replies)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from crw.bus import inbox as reports
from crw.bus import steps as bus
from crw.engine.run.rundir import RunDir
from crw.private import write_atomic
from tests.umask import umask_set

UMASKS = [pytest.param(0o022, id="umask-022"), pytest.param(0o000, id="umask-000")]


@pytest.fixture(params=UMASKS)
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    with umask_set(request.param):
        yield request.param


def mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


def step(call: str = "build.1") -> bus.StepFile:
    return bus.StepFile(
        call=call, k=1, attempt=1, op=f"{call}/t1", marker=f"{call}/t1-a1", role="executor",
        action="spawn", agent_type="worker", model=None, reasoning_effort=None,
        message="m", packet="p", workspace="/w", agent_id=None,
    )  # fmt: skip


def test_run_directory_journal_and_log_are_private(tmp_path: Path, umask: int) -> None:
    run = RunDir(tmp_path / "state" / "flow" / "r1")
    run.create()
    for directory in (run.root, run.steps, run.inbox, run.replies, run.outbox, run.calls):
        assert mode(directory) == 0o700, directory
    for file in (run.journal, run.log):
        assert mode(file) == 0o600 and file.stat().st_size == 0, file


def test_packets_steps_and_close_steps_are_private(tmp_path: Path, umask: int) -> None:
    run = RunDir(tmp_path / "r1")
    run.create()
    bus.write_step(run, step(), "# packet\n")
    bus.write_close(run, "build.1", 1, "agent-1")
    packet, step_file = bus.step_paths(run, "build.1", 1, 1)
    assert mode(run.steps / "build.1") == 0o700
    for file in (packet, step_file, bus.close_path(run, "build.1", 1, "agent-1")):
        assert mode(file) == 0o600, file


def test_reports_and_replies_are_private(tmp_path: Path, umask: int) -> None:
    run = RunDir(tmp_path / "r1")
    run.create()
    report = reports.Report.new("r1", "build.1", 1, 1, "agent-1", "t")
    written = reports.write_report(run, report)
    assert mode(written) == 0o600
    reports.write_reply(run, {"id": report.id, "reply": "bound"})
    assert mode(reports.reply_path(run, report.id)) == 0o600


def test_a_write_that_fails_names_its_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A write or fsync names no file of its own: the error says which it was."""

    def full(fd: int, data: object) -> int:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "write", full)
    with pytest.raises(OSError) as failed:
        write_atomic(tmp_path / "a.json", b"{}")
    assert failed.value.filename == str(tmp_path / ".a.json.tmp")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("value", "chmods"),
    [
        pytest.param(0o022, 0, id="umask-022"),
        pytest.param(0o077, 0, id="umask-077"),
        pytest.param(0o277, 1, id="umask-277"),
        pytest.param(0o477, 1, id="umask-477"),
    ],
)
def test_a_file_is_chmodded_only_when_the_umask_takes_a_bit_of_0600(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: int, chmods: int
) -> None:
    """Every file the bus writes is 0600; the open makes it so whenever the umask
    leaves the user's read and write bits, and only a umask that takes one of them
    costs the file an fchmod (one syscall of each of a session call's four files)."""
    calls: list[int] = []
    fchmod = os.fchmod

    def counted(fd: int, mode: int) -> None:
        calls.append(mode)
        fchmod(fd, mode)

    monkeypatch.setattr(os, "fchmod", counted)
    with umask_set(value):
        write_atomic(tmp_path / "a.json", b"{}", durable=False)
        write_atomic(tmp_path / "b.json", b"{}")
    assert mode(tmp_path / "a.json") == mode(tmp_path / "b.json") == 0o600
    assert len(calls) == 2 * chmods


def test_a_run_directory_made_again_where_it_went_missing_is_private(
    tmp_path: Path, umask: int
) -> None:
    """The bus makes the inbox, the replies and the steps directory again when one
    is missing (a user's clean-up under a live run): 0700, as the run made them."""
    from crw.bus import control, live

    run = RunDir(tmp_path / "r1")
    run.create()
    for directory in (run.inbox, run.replies, run.steps):
        directory.rmdir()
    report = reports.Report.new("r1", "build.1", 1, 1, "agent-1", "t")
    reports.write_report(run, report)
    reports.write_reply(run, {"id": report.id, "reply": "bound"})
    live.open_index(run, "token-1")
    assert {mode(d) for d in (run.inbox, run.replies, run.steps)} == {0o700}
    run.inbox.rmdir()
    control.write_request(run, control.Request.new("r1", "pause", "2026-12-02T00:00:00Z"))
    assert mode(run.inbox) == 0o700
