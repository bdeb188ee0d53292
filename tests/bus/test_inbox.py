"""Dispatch reports in inbox/ and the run's replies in replies/."""

from __future__ import annotations

import errno
import json
import logging
import os
from pathlib import Path
from typing import Any

import pytest

from crw.bus.inbox import (
    Report,
    read_reply,
    read_reports,
    remove_report,
    take_reply,
    write_reply,
    write_report,
)
from crw.engine.run.rundir import RunDir
from tests.oscalls import os_calls


@pytest.fixture
def run(tmp_path: Path) -> RunDir:
    run = RunDir.of(tmp_path / "state", "r1")
    run.create()
    return run


def report(at: str = "2026-01-01T00:00:00.000000Z", agent: str | None = "thread-1") -> Report:
    return Report.new("r1", "build.1", 1, 1, agent, at)


def test_report_is_written_into_the_inbox_with_its_members(run: RunDir) -> None:
    """spec: DISP-1"""
    sent = report()
    path = write_report(run, sent)
    assert path == run.inbox / f"{sent.id}.json"
    assert json.loads(path.read_text()) == {
        "id": sent.id,
        "run": "r1",
        "call": "build.1",
        "k": 1,
        "attempt": 1,
        "agent_id": "thread-1",
        "reported_at": "2026-01-01T00:00:00.000000Z",
    }
    assert sorted(os.listdir(run.inbox)) == [f"{sent.id}.json"]


def test_report_ids_are_fresh_uuid4_hex() -> None:
    first, second = report(), report()
    assert first.id != second.id
    assert len(first.id) == 32 and int(first.id, 16) >= 0


def test_report_goes_through_its_temporary_name(
    run: RunDir, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: CMD-DISP-2"""
    renames: list[tuple[str, str]] = []
    real_replace = os.replace

    def spy(src: Any, dst: Any) -> None:
        renames.append((Path(src).name, Path(dst).name))
        real_replace(src, dst)

    monkeypatch.setattr("crw.bus.steps.os.replace", spy)
    sent = report()
    write_report(run, sent)
    monkeypatch.undo()
    assert renames == [(f".{sent.id}.tmp", f"{sent.id}.json")]


def test_a_report_is_written_without_an_fsync(run: RunDir, monkeypatch: pytest.MonkeyPatch) -> None:
    """spec: CMD-DISP-2, DISP-25, ATT-19: a report goes through its temporary name
    and is never synced (two fsyncs before, on the owner's every step): a live run
    reads it, and a power loss that took it took the `dispatched` waiting on it too;
    the resumed run finds the subagent it named on the host by the step's marker."""
    synced: list[int] = []
    monkeypatch.setattr(os, "fsync", synced.append)
    sent = report()
    write_report(run, sent)
    assert synced == []
    assert read_reports(run) == [sent]
    assert os.listdir(run.inbox) == [f"{sent.id}.json"]


def test_failed_report_write_leaves_nothing_in_the_inbox(
    run: RunDir, monkeypatch: pytest.MonkeyPatch
) -> None:
    def full(fd: int, data: Any) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("crw.bus.steps.os.write", full)
    with pytest.raises(OSError):
        write_report(run, report())
    monkeypatch.undo()
    assert os.listdir(run.inbox) == []
    assert read_reports(run) == []


def test_reports_are_read_oldest_first(run: RunDir) -> None:
    """spec: DISP-1"""
    late = report("2026-01-01T00:00:02.000000Z")
    early = report("2026-01-01T00:00:01.000000Z")
    same_a = Report("a" * 32, "r1", "build.2", 1, 1, None, "2026-01-01T00:00:03.000000Z")
    same_b = Report("b" * 32, "r1", "build.2", 1, 1, None, "2026-01-01T00:00:03.000000Z")
    for sent in (same_b, late, same_a, early):
        write_report(run, sent)
    assert read_reports(run) == [early, late, same_a, same_b]


def test_report_without_a_subagent_reads_with_agent_id_none(run: RunDir) -> None:
    """session-formats: agent_id may be null or absent."""
    sent = report(agent=None)
    data = sent.to_json()
    del data["agent_id"]
    (run.inbox / f"{sent.id}.json").write_text(json.dumps(data))
    assert read_reports(run) == [sent]


def test_malformed_reports_are_skipped_and_logged_once(
    run: RunDir, caplog: pytest.LogCaptureFixture
) -> None:
    good = report()
    write_report(run, good)
    (run.inbox / "bad1.json").write_text("{not json")
    (run.inbox / "bad2.json").write_text(json.dumps(report().to_json()))  # id is not its name
    (run.inbox / "bad3.json").write_text(json.dumps({"id": "bad3", "k": 1}))
    (run.inbox / "bad4.json").write_text("[1, 2]")
    (run.inbox / ".pending.tmp").write_text("{")
    with caplog.at_level(logging.WARNING, logger="crw.bus"):
        assert read_reports(run) == [good]
        assert read_reports(run) == [good]
    skipped = sorted(Path(str(record.args[0])).name for record in caplog.records)  # type: ignore[index]
    assert skipped == ["bad1.json", "bad2.json", "bad3.json", "bad4.json"]


def test_reading_a_run_without_an_inbox_finds_nothing(tmp_path: Path) -> None:
    assert read_reports(RunDir(tmp_path / "nowhere")) == []


def test_reply_is_written_then_the_report_removed(run: RunDir) -> None:
    """spec: DISP-2"""
    sent = report()
    write_report(run, sent)
    reply = {
        "id": sent.id,
        "reply": "bound",
        "reason": "the subagent carries the marker",
        "call": "build.1",
        "k": 1,
        "attempt": 1,
        "agent_id": "thread-1",
        "warnings": ["pair_unchecked"],
    }
    write_reply(run, reply)
    assert json.loads((run.replies / f"{sent.id}.json").read_text()) == reply
    assert read_reply(run, sent.id) == reply
    assert os.listdir(run.inbox) == []
    assert [p.name for p in run.replies.iterdir()] == [f"{sent.id}.json"]


def test_reply_is_written_atomically_without_an_fsync(
    run: RunDir, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: DISP-2. The reply goes through its temporary name and a rename, and is
    never synced: a live `dispatched` reads it, and the rows it answers from are
    durable before it is written (the run's loop does not wait on a disk for it)."""
    sent = report()
    write_report(run, sent)
    synced: list[int] = []
    renamed: list[tuple[str, str]] = []
    replace = os.replace

    def rename(a: Any, b: Any) -> None:
        renamed.append((Path(a).name, Path(b).name))
        replace(a, b)

    monkeypatch.setattr(os, "fsync", synced.append)
    monkeypatch.setattr(os, "replace", rename)
    write_reply(run, {"id": sent.id, "reply": "bound"})
    assert synced == []
    assert renamed == [(f".{sent.id}.tmp", f"{sent.id}.json")]
    assert read_reply(run, sent.id) == {"id": sent.id, "reply": "bound"}
    assert os.listdir(run.inbox) == []


def test_failed_reply_write_keeps_the_report(run: RunDir, monkeypatch: pytest.MonkeyPatch) -> None:
    sent = report()
    write_report(run, sent)

    def full(fd: int, data: Any) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("crw.bus.steps.os.write", full)
    with pytest.raises(OSError):
        write_reply(run, {"id": sent.id, "reply": "retry", "reason": "host unreadable"})
    monkeypatch.undo()
    assert read_reports(run) == [sent]
    assert read_reply(run, sent.id) is None
    assert os.listdir(run.replies) == []


def test_reply_to_a_report_answered_again_is_the_same_file(run: RunDir) -> None:
    """A crash between the reply and the removal answers the report again."""
    sent = report()
    write_report(run, sent)
    reply = {"id": sent.id, "reply": "close", "reason": "the attempt ended answered"}
    write_reply(run, reply)
    write_report(run, sent)
    write_reply(run, reply)
    assert read_reply(run, sent.id) == reply and read_reports(run) == []


def test_a_taken_reply_is_read_once_then_its_file_is_gone(run: RunDir) -> None:
    """spec: DISP-2. The owner reads the run's answer from replies/ and takes it:
    `take_reply` returns the reply and removes its file, so a second look finds
    none."""
    sent = report()
    write_report(run, sent)
    write_reply(run, {"id": sent.id, "reply": "bound"})
    assert take_reply(run, sent.id) == {"id": sent.id, "reply": "bound"}
    assert os.listdir(run.replies) == []
    assert take_reply(run, sent.id) is None


def test_a_reply_not_yet_readable_is_not_taken(run: RunDir) -> None:
    """A file under the reply's name that does not read as a JSON object (damaged
    on disk, or put there by hand) is not the answer: it is left where it is, for
    the next look and for the run's end."""
    sent = report()
    (run.replies / f"{sent.id}.json").write_text('{"id": "')
    assert take_reply(run, sent.id) is None
    assert os.listdir(run.replies) == [f"{sent.id}.json"]


def test_a_reply_that_cannot_be_removed_is_still_returned(
    run: RunDir, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reply is the owner's answer whether or not its file can be removed (a
    read-only replies/): the file stays for the run's end to remove."""
    sent = report()
    write_report(run, sent)
    write_reply(run, {"id": sent.id, "reply": "bound"})

    def refused(path: Any) -> None:
        raise PermissionError(errno.EACCES, "Permission denied", path)

    monkeypatch.setattr("crw.bus.inbox.os.unlink", refused)
    assert take_reply(run, sent.id) == {"id": sent.id, "reply": "bound"}
    monkeypatch.undo()
    assert os.listdir(run.replies) == [f"{sent.id}.json"]


def test_missing_or_unreadable_reply_reads_as_none(run: RunDir) -> None:
    assert read_reply(run, "0" * 32) is None
    (run.replies / ("1" * 32 + ".json")).write_text("[]")
    assert read_reply(run, "1" * 32) is None


def test_remove_report_of_an_answered_report_does_nothing(run: RunDir) -> None:
    remove_report(run, "0" * 32)
    assert os.listdir(run.inbox) == []


def test_report_id_that_is_no_file_name_is_refused(run: RunDir) -> None:
    with pytest.raises(ValueError):
        write_reply(run, {"id": "../run.json", "reply": "bound"})


def test_the_inbox_and_replies_are_made_only_when_a_write_finds_them_missing(
    run: RunDir, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: DISP-1, DISP-2: the run's directory has inbox/ and replies/ from its
    start; a report or a reply makes no directory (a `mkdir` each before), and one
    removed meanwhile is made again by the next write into it."""
    made: list[str] = []
    mkdir = os.mkdir

    def counted(path: Any, *args: Any, **kwargs: Any) -> None:
        made.append(os.path.basename(path))
        mkdir(path, *args, **kwargs)

    monkeypatch.setattr(os, "mkdir", counted)
    for _ in range(3):
        sent = report()
        write_report(run, sent)
        write_reply(run, {"id": sent.id, "reply": "bound"})
        assert read_reply(run, sent.id) == {"id": sent.id, "reply": "bound"}
    assert made == []
    for directory in (run.inbox, run.replies):
        for entry in directory.iterdir():
            entry.unlink()
        directory.rmdir()
    sent = report()
    write_report(run, sent)
    write_reply(run, {"id": sent.id, "reply": "bound"})
    assert made == ["inbox", "replies"]
    assert read_reply(run, sent.id) == {"id": sent.id, "reply": "bound"}


def test_a_reply_whose_directory_is_a_file_fails_as_its_mkdir_did(run: RunDir) -> None:
    """spec: DISP-2: replies/ that is a file fails the reply with the error a
    `mkdir` of it gives (EEXIST, naming replies/), which the run's write_failed
    pause records; the report stays."""
    sent = report()
    write_report(run, sent)
    run.replies.rmdir()
    run.replies.write_text("")
    with pytest.raises(FileExistsError) as raised:
        write_reply(run, {"id": sent.id, "reply": "bound"})
    assert raised.value.errno == errno.EEXIST and raised.value.filename == str(run.replies)
    assert [r.id for r in read_reports(run)] == [sent.id]


def test_a_reply_is_read_from_one_descriptor_without_a_buffered_reader(
    run: RunDir, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: DISP-2. The reply `crw flow dispatched` waits for is read with an
    open, the reads and a close (no buffered reader's fstats, ioctl and lseeks)."""
    sent = report()
    write_reply(run, {"id": sent.id, "reply": "bound"})
    calls = os_calls(monkeypatch, "open", "read", "close")
    assert read_reply(run, sent.id) == {"id": sent.id, "reply": "bound"}
    assert calls == ["open", "read", "read", "close"]


def test_a_reply_is_looked_for_by_its_joined_name_without_a_path_object(
    run: RunDir, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: DISP-2. dispatched looks for its reply twice a report (before the
    watch's wake and at it): its path is joined as a string, no Path made; an id
    that is no report id is no reply."""
    from pathlib import PurePath

    sent = report()
    write_reply(run, {"id": sent.id, "reply": "bound"})
    run.replies  # noqa: B018 - the run's own directory paths are made once, before
    made: list[object] = []
    join = PurePath.__truediv__

    def counted(self: PurePath, key: str) -> PurePath:
        made.append(key)
        return join(self, key)

    monkeypatch.setattr(PurePath, "__truediv__", counted)
    assert read_reply(run, sent.id) == {"id": sent.id, "reply": "bound"}
    assert read_reply(run, "../escape") is None
    assert made == []


def test_a_reports_members_are_made_without_a_deep_copy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """spec: DISP-1. A report's members are its fields, `failed` only on a failed
    spawn's, made as a flat dict (the owner writes one a call), not by asdict."""
    import dataclasses

    copies: list[int] = []
    inner = dataclasses._asdict_inner  # type: ignore[attr-defined]

    def counted(*args: Any) -> Any:
        copies.append(1)
        return inner(*args)

    monkeypatch.setattr(dataclasses, "_asdict_inner", counted)
    sent = report()
    assert list(sent.to_json()) == ["id", "run", "call", "k", "attempt", "agent_id", "reported_at"]
    failed = Report.new("r1", "build.1", 1, 1, None, "2026-01-01T00:00:00Z", "refused")
    assert failed.to_json()["failed"] == "refused" and copies == []
