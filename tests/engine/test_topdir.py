"""A run's directories that get a subdirectory a call spread them over the file
system's block groups (ext4's Orlov allocator, `FS_TOPDIR_FL`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from crw.engine.rundir import RunDir
from crw.engine.topdir import spread_subdirectories, spreads_subdirectories


@pytest.fixture
def flags(tmp_path: Path) -> None:
    """Skip unless the test directory is on ext2/3/4, which has `FS_TOPDIR_FL`
    (told from the mount table, not by the function under test)."""
    mounts = [line.split() for line in Path("/proc/self/mounts").read_text().splitlines()]
    where = str(tmp_path.resolve())
    found = [
        (point, kind) for _, point, kind, *_ in mounts if where.startswith(point.rstrip("/") + "/")
    ]
    kind = max(found, key=lambda m: len(m[0]))[1] if found else ""
    if kind not in ("ext2", "ext3", "ext4"):
        pytest.skip(f"the test directory is on {kind or 'an unknown file system'}, not ext4")


def test_a_new_run_spreads_its_call_directories(tmp_path: Path, flags: None) -> None:
    """The run's directory, steps/ and calls/ (a subdirectory a call each) carry
    the flag; the rest, whose files are made in the directory itself, do not."""
    run = RunDir.of(tmp_path / "state", "r1")
    run.create()
    spread = {d.name for d in (run.root, run.steps, run.calls) if spreads_subdirectories(d)}
    assert spread == {run.root.name, "steps", "calls"}
    assert not any(spreads_subdirectories(d) for d in (run.inbox, run.replies, run.outbox))


def test_a_directory_that_cannot_be_flagged_is_left_as_it_is(tmp_path: Path) -> None:
    assert spread_subdirectories(tmp_path / "missing") is False
    assert spreads_subdirectories(tmp_path / "missing") is False
    file = tmp_path / "file"
    file.write_text("x")
    assert spread_subdirectories(file) is False
