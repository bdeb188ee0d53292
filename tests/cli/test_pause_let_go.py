"""A pause or cancel answers once the process that answered it let go of the run
(docs/pause-cancel.md: "A resume started after the pause answered resumes the
run"): a run process writes its `paused` row, then exits, and a resume started in
between was refused as held by a live process."""

from __future__ import annotations

import fcntl
import os
import threading
import time
from pathlib import Path

from crw.cli.run import pause
from crw.engine.run.locks import run_is_live
from crw.engine.run.rundir import RunDir


def _held(run: RunDir) -> int:
    run.root.mkdir(parents=True, exist_ok=True)
    fd = os.open(run.run_lock, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


def test_the_answer_waits_for_the_answering_process_to_let_go_of_the_run(
    tmp_path: Path,
) -> None:
    """A process that still holds the run lock after its row: the command waits
    until it lets go."""
    run = RunDir(tmp_path / "r")
    fd = _held(run)
    threading.Timer(0.3, os.close, (fd,)).start()
    pause._let_go(run, time.monotonic() + 60)
    assert not run_is_live(run)


def test_a_process_that_never_lets_go_holds_the_answer_only_to_the_deadline(
    tmp_path: Path,
) -> None:
    run = RunDir(tmp_path / "r")
    fd = _held(run)
    try:
        pause._let_go(run, time.monotonic() + 0.2)
        assert run_is_live(run)
    finally:
        os.close(fd)
