"""A journal the run's process cannot write, with real `crw` processes: the
process `next` launches stops at its first row (its started row) with one line
naming the journal, the OS error and the fix; the launch record keeps that line
and the stamps of the files it could have stopped on, and the `next` calls after
it launch nothing while those files are as they were. A fix changes the journal
(`chattr -i`, `chmod`): the next `next` launches once and the run goes on.

The journal is made immutable with `chattr +i` where the machine allows it (root
with CAP_LINUX_IMMUTABLE, a file system that keeps the flag). Elsewhere the same
fault is injected at the OS call: a `sitecustomize` on the processes' PYTHONPATH
makes `os.open` of the journal for writing fail with EPERM while a marker file
exists, and the fix is a `chmod` of the journal. Each test runs both ways (the
`chattr` one falls back to the injected fault); `Unwritable.kind`, in every
assertion's message, says which one ran.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from crw.engine.run.rundir import RunDir
from crw.journal.log import read_journal
from tests.cli.conftest import Crw, Result, wait_for_exit
from tests.cli.test_next import RUN, _make_run, _step

SHIM = """
import errno, os

_open, _write = os.open, os.write
_MARKER = os.environ["CRW_TEST_UNWRITABLE"]
_FULL = os.environ.get("CRW_TEST_FULL") == "1"
_KILLED = os.environ.get("CRW_TEST_KILLED") == "1"
_journals = set()


def _unwritable(path, flags, *args, **kwargs):
    writes = flags & (os.O_WRONLY | os.O_RDWR | os.O_APPEND)
    journal = writes and os.fspath(path).endswith("journal.jsonl")
    if journal and _KILLED and os.path.exists(_MARKER):
        os.kill(os.getpid(), 9)
    if journal and not _FULL and os.path.exists(_MARKER):
        raise PermissionError(errno.EPERM, os.strerror(errno.EPERM), os.fspath(path))
    fd = _open(path, flags, *args, **kwargs)
    if journal:
        _journals.add(fd)
    return fd


def _full(fd, data):
    if fd in _journals and os.path.exists(_MARKER):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    return _write(fd, data)


os.open = _unwritable
os.write = _full
"""
"""Injected faults: the journal's `os.open` for writing fails with EPERM, or,
with CRW_TEST_FULL=1, each `os.write` to it fails with ENOSPC (a full disk: the
open works, the append fails and is cut back), or, with CRW_TEST_KILLED=1, the
process SIGKILLs itself as it opens it, while the marker file exists."""


class Unwritable:
    """Makes the run's journal unwritable and writable again: `chattr +i` where it
    works, else the injected EPERM (`kind` says which)."""

    def __init__(
        self, crw: Crw, journal: Path, shim: Path, chattr: bool, full: bool = False
    ) -> None:
        self.journal = journal
        self.marker = shim / "unwritable"
        self.kind = "chattr" if chattr and _chattr(journal, "+i") else "injected"
        if self.kind == "injected":
            shim.mkdir(exist_ok=True)
            (shim / "sitecustomize.py").write_text(SHIM)
            self.marker.touch()
            path = os.pathsep.join(filter(None, [str(shim), crw.env.get("PYTHONPATH")]))
            crw.env |= {"PYTHONPATH": path, "CRW_TEST_UNWRITABLE": str(self.marker)}
            crw.env |= {"CRW_TEST_FULL": "1"} if full else {}

    def fix(self) -> None:
        """What the user does: clear the flag, or give write access back."""
        if self.kind == "chattr":
            assert _chattr(self.journal, "-i")
        else:
            self.marker.unlink()
            os.chmod(self.journal, 0o644)

    def undo(self) -> None:
        if self.kind == "chattr":
            _chattr(self.journal, "-i")


def _chattr(path: Path, flag: str) -> bool:
    """Whether `chattr FLAG path` worked here."""
    if shutil.which("chattr") is None:
        return False
    done = subprocess.run(["chattr", flag, str(path)], capture_output=True, check=False)
    return done.returncode == 0


@pytest.fixture(params=["chattr", "injected"])
def unwritable(
    crw: Crw, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[tuple[RunDir, Unwritable]]:
    """A session run whose process died, its journal unwritable: by `chattr +i`
    (the injected EPERM where chattr cannot run), and by the injected EPERM."""
    run = _make_run(crw)
    _step(run, "build.1", 1, 1)  # a step the dead process left
    fault = Unwritable(crw, run.journal, tmp_path / "shim", request.param == "chattr")
    try:
        yield run, fault
    finally:
        fault.undo()
        _reap(run)


def _pids(run: RunDir) -> list[int]:
    """The pids of the started rows: the dead process's (1, never signalled), then
    those of the processes launched since."""
    return [row["pid"] for row in read_journal(run.journal).rows if row["row"] == "started"]


def _reap(run: RunDir) -> None:
    for pid in _pids(run)[1:]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _next(crw: Crw) -> Result:
    return crw("flow", "next", RUN, "--state", str(crw.state), "--json")


def _errors(run: RunDir) -> list[str]:
    """The error line of each process that stopped (run.log)."""
    return [line for line in run.log.read_text().splitlines() if line.startswith("crw: error:")]


def _names_error_and_fix(view: dict[str, Any], crw: Crw, run: RunDir) -> None:
    resume = f"crw flow resume {RUN} --detach --state {crw.state}"
    hint = view["hint"]
    assert view["state"] == "running" and view["steps"] == [], view
    assert f"cannot write its journal {run.journal}" in hint, hint
    assert "Operation not permitted (EPERM)" in hint, hint
    assert f"clear its immutable flag (chattr -i {run.journal})" in hint, hint
    assert resume in hint, hint
    assert "next starts no process for it until" in hint, hint


def test_an_unwritable_journal_is_launched_once_not_once_per_next(
    crw: Crw, unwritable: tuple[RunDir, Unwritable]
) -> None:
    """spec: CMD-NEXT-18: a run no process holds is resumed by next, once: the
    process stops at its started row (the journal cannot be written) with one line
    naming the journal, the error and the fix, and five `next` calls launch that
    one process in all, each answering the error and the fix (exit 0, no step of
    the dead process); once the journal is fixed, next launches one process, which
    records its started row and removes the record."""
    run, fault = unwritable
    before = run.journal.read_bytes()
    answers = [_next(crw) for _ in range(5)]
    for answer in answers:
        assert answer.code == 0, (fault.kind, answer.stderr)
        _names_error_and_fix(answer.json(), crw, run)
        assert "resumed_pid" not in answer.json()
    errors = _errors(run)
    assert len(errors) == 1, (fault.kind, errors)  # one process launched, not five
    assert f"run {RUN} stopped: cannot write its journal {run.journal}: " in errors[0]
    assert "its resume did not start" in answers[0].stderr
    assert all("its resume did not start" not in a.stderr for a in answers[1:])
    assert run.journal.read_bytes() == before and _pids(run) == [1]
    record = crw("flow", "status", RUN, "--state", str(crw.state), "--json").json()
    assert errors[0].endswith(record["launch_failed"]["reason"]), fault.kind

    fault.fix()
    resumed = _next(crw)
    assert resumed.code == 0, resumed.stderr
    pid = resumed.json()["resumed_pid"]
    crw.pids.append(pid)
    assert _pids(run) == [1, pid], fault.kind
    wait_for_exit(run.root)  # it finds no host and pauses
    assert not run.launch_failed.exists()
    assert len(_errors(run)) == 1


def test_a_journal_that_stays_unwritable_is_launched_again_by_resume_only(
    crw: Crw, unwritable: tuple[RunDir, Unwritable]
) -> None:
    """No requirement names it yet: an explicit `resume --detach` launches whatever the
    record says: its process stops at its started row again (exit 1, the same
    line), and the `next` after it launches nothing."""
    run, fault = unwritable
    assert _next(crw).code == 0
    resumed = crw("flow", "resume", RUN, "--detach", "--state", str(crw.state), "--json")
    assert resumed.code == 1, (fault.kind, resumed.stdout)
    assert f"cannot write its journal {run.journal}" in resumed.error()
    assert len(_errors(run)) == 2, fault.kind
    _names_error_and_fix(_next(crw).json(), crw, run)
    assert len(_errors(run)) == 2, fault.kind


def test_a_full_disk_is_launched_once_and_again_by_resume_once_space_is_freed(
    crw: Crw, tmp_path: Path
) -> None:
    """spec: CMD-NEXT-18: the journal's appends fail with ENOSPC (injected at the
    OS call: the open works, the append is cut back, which moves the journal's
    times): next launches one process, which stops at its started row with the
    line naming the journal, ENOSPC and the fix; the next calls after it launch
    nothing, also once space is freed (no file of the run changed), and name the
    resume; `resume --detach` then starts the run's process."""
    run = _make_run(crw)
    fault = Unwritable(crw, run.journal, tmp_path / "shim", chattr=False, full=True)
    try:
        answers = [_next(crw) for _ in range(3)]
        fault.marker.unlink()  # space freed: nothing of the run changes
        answers.append(_next(crw))
        errors = _errors(run)
        assert len(errors) == 1, errors
        assert (
            f"cannot write its journal {run.journal}: No space left on device (ENOSPC); "
            in (errors[0])
        )
        assert "free space on its file system" in errors[0]
        for answer in answers:
            assert answer.code == 0 and "resumed_pid" not in answer.json(), answer.stderr
            hint = answer.json()["hint"]
            assert "(ENOSPC)" in hint and "next starts no process for it until" in hint, hint
            assert f"crw flow resume {RUN} --detach --state {crw.state}" in hint, hint
        resumed = crw("flow", "resume", RUN, "--detach", "--state", str(crw.state), "--json")
        assert resumed.code == 0, resumed.stderr
        assert _pids(run) == [1, resumed.json()["pid"]]
        wait_for_exit(run.root)
    finally:
        _reap(run)


def test_a_process_killed_on_its_way_up_holds_no_launch_back(crw: Crw) -> None:
    """spec: CMD-NEXT-18: a launched process killed by a signal before its started
    row (nothing of the run stopped it) is recorded without stamps: each next
    launches again, as for any run no process holds."""
    run = _make_run(crw)
    marker = crw.state.parent / "shim" / "unwritable"
    marker.parent.mkdir()
    (marker.parent / "sitecustomize.py").write_text(SHIM)
    marker.touch()
    crw.env |= {
        "PYTHONPATH": str(marker.parent),
        "CRW_TEST_UNWRITABLE": str(marker),
        "CRW_TEST_KILLED": "1",
    }
    statuses = []
    for _ in range(2):
        answer = _next(crw)
        assert answer.code == 0 and "resumed_pid" not in answer.json(), answer.stderr
        assert "next starts no process" not in answer.json()["hint"]
        statuses.append(crw("flow", "status", RUN, "--state", str(crw.state), "--json").json())
    failed = [status["launch_failed"] for status in statuses]
    assert all("exited with status -9" in record["reason"] for record in failed), failed
    assert failed[0]["pid"] != failed[1]["pid"]  # the second next launched again
    assert _pids(run) == [1]


CONNECT_SHIM = """
import os, socket

_MARKER = os.environ["CRW_TEST_DEFECT"]
_connect = socket.socket.connect


def _defect(self, address):
    if os.path.exists(_MARKER):
        raise RuntimeError("a defect in the connect to the host")
    return _connect(self, address)


socket.socket.connect = _defect
"""
"""An error no row records, after the started row: the run process's connect to
its host raises RuntimeError (a defect, no fault) while the marker file exists."""


def test_a_process_that_stops_after_its_started_row_is_launched_once_not_once_per_next(
    crw: Crw,
) -> None:
    """spec: CMD-NEXT-18: a run no process holds is resumed by next, once: its
    process records its started row, then stops on an error no row records; it
    keeps the line as the run's launch record, so the `next` calls after it launch
    nothing and name the process, the line and the resume to run; status says its
    last process stopped; `resume --detach` launches again, and the process that
    records its started row removes the record."""
    run = _make_run(crw)
    shim = crw.state.parent / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(CONNECT_SHIM)
    marker = shim / "defect"
    marker.touch()
    crw.env |= {"PYTHONPATH": str(shim), "CRW_TEST_DEFECT": str(marker)}
    try:
        answers = [_next(crw) for _ in range(4)]
        pids = _pids(run)
        assert len(pids) == 2, pids  # the dead process's, and the one launched: not four
        log = run.log.read_text()  # a defect: its traceback, once
        assert log.count("Traceback") == 1 and "RuntimeError: a defect in the connect" in log
        told = f"its process {pids[1]} stopped after its started row: RuntimeError: a defect"
        for answer in answers[1:]:
            assert answer.code == 0 and "resumed_pid" not in answer.json(), answer.stderr
            hint = answer.json()["hint"]
            assert told in hint and f"(see {run.log})" in hint, hint
            assert f"crw flow resume {RUN} --detach --state {crw.state}" in hint, hint
            assert "next starts no process for it until" in hint, hint
        status = crw("flow", "status", RUN, "--state", str(crw.state), "--json").json()
        assert status["launch_failed"]["started"] is True
        assert status["launch_failed"]["pid"] == pids[1]
        assert status["todo"][0]["do"].startswith(
            f"its last process ({pids[1]}) stopped after its started row: RuntimeError: a defect"
        )
        human = crw("flow", "status", RUN, "--state", str(crw.state)).stdout
        assert "its last process stopped: RuntimeError: a defect" in human, human
        marker.unlink()  # the defect fixed
        resumed = crw("flow", "resume", RUN, "--detach", "--state", str(crw.state), "--json")
        assert resumed.code == 0, resumed.stderr
        assert _pids(run) == [*pids, resumed.json()["pid"]]
        wait_for_exit(run.root)  # it finds no host and pauses
        assert not run.launch_failed.exists()
    finally:
        _reap(run)
