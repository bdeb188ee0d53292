"""Tests that read or set ext4's inode flags run only where the test directory is
on ext2/3/4 (told from the mount table, not by the code under test)."""

from __future__ import annotations

from pathlib import Path

import pytest


def skip_unless_ext4(path: Path) -> None:
    """Skip the calling test unless `path` is on ext2, ext3 or ext4."""
    mounts = [line.split() for line in Path("/proc/self/mounts").read_text().splitlines()]
    where = str(path.resolve())
    found = [
        (point, kind) for _, point, kind, *_ in mounts if where.startswith(point.rstrip("/") + "/")
    ]
    kind = max(found, key=lambda m: len(m[0]))[1] if found else ""
    if kind not in ("ext2", "ext3", "ext4"):
        pytest.skip(f"the test directory is on {kind or 'an unknown file system'}, not ext4")
