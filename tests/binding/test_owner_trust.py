"""A flow-bound directory or file that cannot be trusted is read as no binding,
with a warning, and nothing is written there: a symbolic link, another user's,
or one group or others may write. The binding files are the user's alone."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from crw.binding.owner import (
    LastLine,
    bind_owner,
    close_owner,
    flow_bound_dir,
    owner_file,
    read_last_line,
)
from crw.engine.config.role_names import ROLES
from tests.oscalls import os_calls

OWNER = "019a-thread"
PAIRS: dict[str, dict[str, str]] = {role: {} for role in ROLES}


def _line(run_id: str) -> dict[str, Any]:
    return {"kind": "orchestrator", "run_id": run_id, "policyDigest": "d", "helperPairs": PAIRS}


def _nobody_live(run_id: str) -> bool:
    return False


def _bound_file(state: Path) -> Path:
    path = owner_file(state, OWNER)
    path.parent.mkdir(mode=0o700, parents=True)
    path.write_text(json.dumps(_line("a")) + "\n")
    path.chmod(0o600)
    return path


def test_binding_files_are_private_whatever_the_umask(tmp_path: Path) -> None:
    before = os.umask(0)
    try:
        assert bind_owner(tmp_path, OWNER, _line("a"), _nobody_live).bound
    finally:
        os.umask(before)
    assert flow_bound_dir(tmp_path).stat().st_mode & 0o777 == 0o700
    assert owner_file(tmp_path, OWNER).stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize("bits", [0o020, 0o002], ids=["group", "others"])
def test_file_writable_by_others_is_read_as_no_binding(tmp_path: Path, bits: int) -> None:
    path = _bound_file(tmp_path)
    path.chmod(0o600 | bits)
    last = read_last_line(path)
    assert last.line is None and last.untrusted is not None
    assert "writable by group or others" in last.untrusted
    before = path.read_bytes()
    result = bind_owner(tmp_path, OWNER, _line("b"), _nobody_live)
    assert not result.bound and result.warning is not None
    assert str(path) in result.warning and "\n" not in result.warning
    assert close_owner(tmp_path, OWNER, "a") is None
    assert path.read_bytes() == before


def test_file_of_another_user_is_read_as_no_binding(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _bound_file(tmp_path)
    monkeypatch.setattr(os, "getuid", lambda: 4242)
    assert "owned by another user" in (read_last_line(path).untrusted or "")


def test_symbolic_link_is_not_followed(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere.jsonl"
    elsewhere.write_text(json.dumps(_line("a")) + "\n")
    path = owner_file(tmp_path, OWNER)
    path.parent.mkdir(mode=0o700)
    path.symlink_to(elsewhere)
    assert read_last_line(path) == LastLine(None, untrusted=f"{path} is a symbolic link")
    result = bind_owner(tmp_path, OWNER, _line("b"), _nobody_live)
    assert not result.bound and "symbolic link" in (result.warning or "")
    assert elsewhere.read_text() == json.dumps(_line("a")) + "\n"


def test_directory_writable_by_others_is_not_used(tmp_path: Path) -> None:
    path = _bound_file(tmp_path)
    path.parent.chmod(0o777)
    before = path.read_bytes()
    result = bind_owner(tmp_path, OWNER, _line("b"), _nobody_live)
    assert not result.bound and result.warning is not None
    assert "writable by group or others" in result.warning
    assert path.read_bytes() == before


def test_directory_that_is_a_link_is_not_used(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    flow_bound_dir(tmp_path).symlink_to(real)
    result = bind_owner(tmp_path, OWNER, _line("b"), _nobody_live)
    assert not result.bound and result.warning is not None
    assert list(real.iterdir()) == []


def test_the_owners_line_is_read_from_its_descriptor_without_a_buffered_reader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The owner's last line (read at every `next` read and every spawn-hook call)
    is read raw from the descriptor its trust was checked on: an open, the fstat,
    one read of a file that did not grow, the close; no buffered reader."""
    path = _bound_file(tmp_path)
    path.write_text(json.dumps(_line("a")) + "\n" + json.dumps(_line("b")) + "\n")
    calls = os_calls(monkeypatch, "open", "fstat", "fdopen", "read", "close")
    assert read_last_line(path) == LastLine(_line("b"))
    assert calls == ["open", "fstat", "read", "close"]
