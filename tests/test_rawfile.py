"""A whole file read with the fewest syscalls: the bytes `Path.read_bytes` reads,
from one open, reads until the end and one close (no buffered reader)."""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from crw import rawfile
from crw.bus import inbox
from crw.engine.answers.outcome import read_rollout_total, tokens_from_rollout
from crw.engine.run.rundir import RunDir
from tests.engine.test_outcome import token_line, usage, write_rollout


@pytest.mark.parametrize("size", [0, 1, rawfile.CHUNK - 1, rawfile.CHUNK, 3 * rawfile.CHUNK + 5])
def test_read_bytes_reads_what_path_read_bytes_reads(tmp_path: Path, size: int) -> None:
    path = tmp_path / "f"
    path.write_bytes(os.urandom(size))
    assert rawfile.read_bytes(path) == path.read_bytes()
    assert rawfile.read_bytes(str(path)) == path.read_bytes()


def test_read_bytes_raises_what_path_read_bytes_raises(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        rawfile.read_bytes(tmp_path / "missing")
    with pytest.raises(IsADirectoryError):
        rawfile.read_bytes(tmp_path)


def test_a_report_and_a_rollout_are_read_with_one_open_two_reads_and_one_close(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run's loop thread reads a dispatch report and a turn's rollout each call:
    each is one `os.open`, a read of its bytes, a read that finds the end and one
    `os.close` (four syscalls; Python's buffered reader made nine: two fstats, an
    ioctl and two lseeks more, and opened no file through `os`)."""
    run = RunDir(tmp_path / "r1")
    run.create()
    report = inbox.Report.new("r1", "build.1", 1, 1, "agent-1", "t")
    inbox.write_report(run, report)
    rollout = write_rollout(tmp_path / "rollout.jsonl", [token_line(usage(1))])

    calls: Counter[str] = Counter()

    def counted(name: str, real: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            calls[name] += 1
            return real(*args, **kwargs)

        return call

    inbox.read_reports(run)  # what a first read imports, imported
    for name in ("open", "read", "close"):
        monkeypatch.setattr(os, name, counted(name, getattr(os, name)))

    assert [r.id for r in inbox.read_reports(run)] == [report.id]
    assert read_rollout_total(rollout) == tokens_from_rollout(usage(1))
    assert calls == {"open": 2, "read": 4, "close": 2}
    assert json.loads(rawfile.read_bytes(inbox.report_path(run, report.id)))["id"] == report.id


@pytest.mark.parametrize("size", [0, 1, rawfile.CHUNK, 3 * rawfile.CHUNK + 5])
def test_read_stat_reads_the_bytes_and_the_stat_of_the_file(tmp_path: Path, size: int) -> None:
    path = tmp_path / "f"
    path.write_bytes(os.urandom(size))
    data, stat = rawfile.read_stat(path)
    assert data == path.read_bytes()
    assert (stat.st_ino, stat.st_mtime_ns) == (path.stat().st_ino, path.stat().st_mtime_ns)


@pytest.mark.parametrize("offset", [0, 1, rawfile.CHUNK, 3 * rawfile.CHUNK + 5, 4 * rawfile.CHUNK])
def test_read_from_reads_the_bytes_from_the_offset_to_the_end(tmp_path: Path, offset: int) -> None:
    path = tmp_path / "f"
    data = os.urandom(3 * rawfile.CHUNK + 5)
    path.write_bytes(data)
    assert rawfile.read_from(path, offset) == data[offset:]
