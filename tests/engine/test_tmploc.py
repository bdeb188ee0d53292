"""The one temp-location function (CMD-START-8, -9, -12, -13)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from crw.engine.run import tmploc
from crw.engine.run.tmploc import TmpLocError, check_dir, dir_from
from crw.errors import RefusedError


def test_tmpdir_is_answered_as_written(tmp_path: Path) -> None:
    written = f"{tmp_path}/./sub/../"
    (tmp_path / "sub").mkdir()
    assert dir_from({"TMPDIR": written}) == written


@pytest.mark.parametrize("environ", [{}, {"TMPDIR": ""}])
def test_unset_or_empty_tmpdir_answers_the_default(environ: dict[str, str]) -> None:
    assert dir_from(environ) == tmploc.DEFAULT == "/tmp"


def test_relative_tmpdir_is_refused_with_the_reason() -> None:
    with pytest.raises(TmpLocError) as caught:
        dir_from({"TMPDIR": "rel/x"})
    assert isinstance(caught.value, RefusedError)
    assert (
        str(caught.value) == 'TMPDIR "rel/x" is not absolute; set TMPDIR to an absolute directory'
    )


def test_missing_tmpdir_is_refused(tmp_path: Path) -> None:
    missing = str(tmp_path / "gone")
    with pytest.raises(TmpLocError, match=r"does not exist; create it"):
        dir_from({"TMPDIR": missing})


def test_tmpdir_under_a_file_is_refused_as_missing(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(TmpLocError, match=r"does not exist"):
        dir_from({"TMPDIR": str(tmp_path / "file" / "sub")})


def test_tmpdir_that_is_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(TmpLocError, match=r"is not a directory; set TMPDIR to a directory"):
        dir_from({"TMPDIR": str(tmp_path / "file")})


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs Linux /proc")
def test_unwritable_tmpdir_is_refused() -> None:
    # No file can be made in procfs, even by root, so the probe fails honestly.
    with pytest.raises(TmpLocError) as caught:
        dir_from({"TMPDIR": "/proc/self"})
    reason = str(caught.value)
    assert reason.startswith('TMPDIR "/proc/self" is not writable (')
    assert reason.endswith("make it writable or set TMPDIR to a writable directory")


def test_writability_probe_leaves_nothing_behind(tmp_path: Path) -> None:
    check_dir(str(tmp_path))
    assert list(tmp_path.iterdir()) == []


def test_reason_is_one_line(tmp_path: Path) -> None:
    odd = str(tmp_path / "a\nb")
    with pytest.raises(TmpLocError) as caught:
        check_dir(odd)
    assert "\n" not in str(caught.value)
