"""The process lock, the run lock and the start lock (BIND-LINE-15, -17, -18, -20)."""

from __future__ import annotations

import fcntl
import logging
import os
import select
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import filelock
import pytest
from filelock import UnixFileLock

from crw.engine.run import locks
from crw.engine.run.locks import (
    RunHeldError,
    held_process_tokens,
    hold_run,
    is_held,
    run_is_live,
    run_lock,
    start_lock,
    take_process_lock,
)
from crw.engine.run.rundir import RunDir

# Takes one lock of the run, prints a line once it holds it (the process lock's
# token, else "held"), and keeps it until its stdin closes.
_HOLDER = """
import sys
from pathlib import Path
from crw.engine.run import locks
from crw.engine.run.rundir import RunDir

kind, root = sys.argv[1], Path(sys.argv[2])
run = RunDir(root)
if kind == "process":
    held = locks.take_process_lock(run)
    assert held is not None
    print(held.token, flush=True)
else:
    held = {"run": locks.run_lock, "start": locks.start_lock}[kind](run)
    print("held", flush=True)
sys.stdin.read()
(held.close if kind == "start" else held.release)()
"""


class Holder:
    """Another process that holds one lock of a run."""

    def __init__(self, kind: str, run: RunDir) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _HOLDER, kind, str(run.root)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], 20)
        assert ready, "the holder did not take its lock in time"
        self.said = self.proc.stdout.readline().strip()
        assert self.said, "the holder ended before it held its lock"

    @property
    def pid(self) -> int:
        return self.proc.pid

    def finish(self) -> int:
        """Close its stdin so it releases and ends; its exit code."""
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        return self.proc.wait(timeout=20)

    def kill(self) -> None:
        os.kill(self.pid, signal.SIGKILL)
        self.proc.wait(timeout=20)

    def reap(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.pid, signal.SIGKILL)
            self.proc.wait(timeout=20)
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                pipe.close()


@pytest.fixture
def holders() -> Iterator[list[Holder]]:
    started: list[Holder] = []
    yield started
    for holder in started:
        holder.reap()


@pytest.fixture
def run(tmp_path: Path) -> RunDir:
    made = RunDir.of(tmp_path, "r1")
    made.create()
    return made


def _hold(holders: list[Holder], kind: str, run: RunDir) -> Holder:
    holder = Holder(kind, run)
    holders.append(holder)
    return holder


def test_run_lock_held_by_another_process_refuses(holders: list[Holder], run: RunDir) -> None:
    holder = _hold(holders, "run", run)
    assert is_held(run.run_lock)
    assert run_is_live(run)
    with pytest.raises(RunHeldError) as caught:
        run_lock(run)
    assert str(caught.value) == (
        f"run r1 is held by another process (pid {holder.pid}); "
        "see its state with: crw flow next r1"
    )


def test_run_lock_of_a_killed_process_is_free(holders: list[Holder], run: RunDir) -> None:
    _hold(holders, "run", run).kill()
    assert not is_held(run.run_lock)
    assert not run_is_live(run)
    with run_lock(run):
        assert is_held(run.run_lock)
    assert run.run_lock.exists()
    assert not is_held(run.run_lock)


def test_start_lock_held_makes_the_run_live(holders: list[Holder], run: RunDir) -> None:
    holder = _hold(holders, "start", run)
    assert not is_held(run.run_lock)
    assert run_is_live(run)
    with pytest.raises(RunHeldError, match="is being started by another process"):
        start_lock(run)
    assert holder.finish() == 0
    assert not run_is_live(run)


def test_run_lock_in_the_same_process_is_held(run: RunDir) -> None:
    with run_lock(run):
        assert run_is_live(run)
        with pytest.raises(RunHeldError, match=f"pid {os.getpid()}"):
            run_lock(run)
    assert not run_is_live(run)


def test_process_lock_of_a_killed_process_stays_held_by_nobody(
    holders: list[Holder], run: RunDir
) -> None:
    holder = _hold(holders, "process", run)
    token = holder.said
    assert held_process_tokens(run) == [token]
    holder.kill()
    assert run.process_lock(token).exists()
    assert not is_held(run.process_lock(token))
    assert held_process_tokens(run) == []


def test_process_lock_file_is_removed_when_its_process_ends(
    holders: list[Holder], run: RunDir
) -> None:
    holder = _hold(holders, "process", run)
    assert run.process_lock(holder.said).exists()
    assert holder.finish() == 0
    assert not run.process_lock(holder.said).exists()


def test_process_lock_release_removes_the_file(run: RunDir) -> None:
    process = take_process_lock(run)
    assert process is not None
    assert held_process_tokens(run) == [process.token]
    assert process.path == run.process_lock(process.token)
    process.release()
    process.release()
    assert not process.path.exists()
    assert held_process_tokens(run) == []


def test_each_process_lock_has_a_fresh_token(run: RunDir) -> None:
    first, second = take_process_lock(run), take_process_lock(run)
    assert first is not None and second is not None
    assert first.token != second.token
    assert held_process_tokens(run) == sorted([first.token, second.token])
    first.release()
    second.release()


class _Recorded:
    """Wraps the locks module's UnixFileLock to record takes and lets-go in order."""

    def __init__(self, order: list[tuple[str, str]]) -> None:
        self.order = order

        class Recording(UnixFileLock):
            def acquire(inner, *args: Any, **kwargs: Any) -> Any:
                got = super().acquire(*args, **kwargs)
                order.append(("take", Path(inner.lock_file).name.split(".")[0]))
                return got

            def release(inner, *args: Any, **kwargs: Any) -> None:
                # filelock's finalizer releases a dropped lock again; only a real one counts.
                if inner.is_locked:
                    order.append(("let go", Path(inner.lock_file).name.split(".")[0]))
                super().release(*args, **kwargs)

        self.cls = Recording


def test_process_lock_is_held_around_the_run_lock(
    run: RunDir, monkeypatch: pytest.MonkeyPatch
) -> None:
    order: list[tuple[str, str]] = []
    monkeypatch.setattr(filelock, "UnixFileLock", _Recorded(order).cls)
    with hold_run(run) as process:
        assert process is not None
        assert held_process_tokens(run) == [process.token]
        assert is_held(run.run_lock)
    assert order == [("take", "process"), ("take", "run"), ("let go", "run"), ("let go", "process")]
    assert not process.path.exists()
    assert not is_held(run.run_lock)


def test_hold_run_on_a_held_run_lets_the_process_lock_go(
    holders: list[Holder], run: RunDir
) -> None:
    _hold(holders, "run", run)
    with pytest.raises(RunHeldError), hold_run(run):
        pytest.fail("the run lock was taken twice")
    assert held_process_tokens(run) == []
    assert list(run.root.glob("process.*.lock")) == []


def test_process_lock_that_cannot_be_taken_is_warned_and_the_run_goes_on(
    run: RunDir, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # Root writes any directory, so the lock's path is taken by a directory instead:
    # opening it for the lock fails for root as for anyone.
    monkeypatch.setattr(locks, "_new_token", lambda: "blocked")
    run.process_lock("blocked").mkdir()
    with caplog.at_level(logging.WARNING, logger="crw.locks"), hold_run(run) as process:
        assert process is None
        assert is_held(run.run_lock)
    assert not is_held(run.run_lock)
    [record] = [r for r in caplog.records if r.name == "crw.locks"]
    assert "cannot take process lock" in record.getMessage()
    assert "names no process" in record.getMessage()


def test_queries_create_no_lock_file(run: RunDir) -> None:
    before = sorted(run.root.iterdir())
    assert not is_held(run.run_lock)
    assert not is_held(run.start_lock)
    assert not run_is_live(run)
    assert held_process_tokens(run) == []
    assert sorted(run.root.iterdir()) == before


def test_a_take_rides_out_a_probe_in_flight(run: RunDir) -> None:
    # Another command's is_held holds a shared flock for a moment; a take meeting it
    # waits it out instead of refusing the run.
    run.run_lock.touch()
    fd = os.open(run.run_lock, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_SH)
    timer = threading.Timer(0.05, os.close, args=(fd,))
    timer.start()
    try:
        with run_lock(run):
            assert is_held(run.run_lock)
    finally:
        timer.join()


# Waits for a line on stdin, then holds the run as the run's process does and says so.
_LAUNCHED = """
import sys
from pathlib import Path
from crw.engine.run.locks import hold_run
from crw.engine.run.rundir import RunDir

sys.stdin.readline()
with hold_run(RunDir(Path(sys.argv[1]))):
    print("held", flush=True)
    sys.stdin.readline()
"""


def test_a_launch_lock_stays_held_by_the_child_until_it_holds_the_run(run: RunDir) -> None:
    """spec: BIND-LINE-19: a handed lock outlives its launcher's descriptor and goes
    once the launched process holds the run lock."""
    with locks.launch_lock(run) as lock:
        child = subprocess.Popen(
            [sys.executable, "-c", _LAUNCHED, str(run.root)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            pass_fds=(lock.fd,),
            env=os.environ | locks.handed_env([lock]),
        )
    assert child.stdin is not None and child.stdout is not None
    try:
        assert locks.is_launching(run)
        with pytest.raises(RunHeldError, match="is being launched by another command"):
            locks.launch_lock(run)
        child.stdin.write("go\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "held"
        assert not locks.is_launching(run) and is_held(run.run_lock)
    finally:
        child.stdin.close()
        child.wait(timeout=20)
        child.stdout.close()


def test_a_launch_lock_goes_when_its_child_dies_before_it_holds_the_run(run: RunDir) -> None:
    with locks.launch_lock(run) as lock:
        child = subprocess.Popen(
            [sys.executable, "-c", "import sys; sys.stdin.read()"],
            stdin=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            pass_fds=(lock.fd,),
        )
    assert locks.is_launching(run)
    child.kill()
    child.wait(timeout=20)
    assert child.stdin is not None
    child.stdin.close()
    assert not locks.is_launching(run)
