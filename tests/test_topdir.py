"""A run's directories that get a subdirectory a call spread them over the file
system's block groups (ext4's Orlov allocator, `FS_TOPDIR_FL`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from crw.engine.run.rundir import RunDir
from crw.topdir import spread_subdirectories, spreads_subdirectories
from tests.ext4 import skip_unless_ext4


@pytest.fixture
def flags(tmp_path: Path) -> None:
    skip_unless_ext4(tmp_path)


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
