"""The wake `crw flow next --wait` sleeps on: a step or close file written during
the wait ends it at once; a packet, an index mark or a new directory alone does
not (each wake costs the owner a whole read)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from crw.bus import live
from crw.bus.steps import write_close, write_packet, write_step, write_step_file
from crw.bus.stepwake import StepWake
from crw.engine.run.locks import ProcessLock
from crw.engine.run.rundir import RunDir
from tests.bus.test_live import holder, run
from tests.bus.test_steps import PACKET, spawn_step

__all__ = ["holder", "run"]

LONG = 30.0
"""A wait no event should have to run out: the test fails long before it would."""
QUIET = 0.3
"""A wait that must run out: nothing woke it."""


@pytest.fixture
def wake(run: RunDir) -> Iterator[StepWake]:
    opened = StepWake.open(run)
    assert opened is not None, "inotify is needed here"
    with opened:
        yield opened


def later(seconds: float, write: object) -> threading.Timer:
    timer = threading.Timer(seconds, write)  # type: ignore[arg-type]
    timer.start()
    return timer


def timed_wait(wake: StepWake, seconds: float) -> tuple[bool, float]:
    began = time.monotonic()
    woken = wake.wait(seconds)
    return woken, time.monotonic() - began


def test_a_step_written_in_a_marked_call_directory_ends_the_wait(
    run: RunDir, holder: ProcessLock
) -> None:
    """spec: CMD-NEXT-11. The call was marked (its packet written) before the wake
    was opened. A packet renamed in during the wait does not end it; the step
    file written after it does."""
    step = spawn_step(run, "build.1")
    write_packet(run, step, PACKET)
    with live.writing(run, "build.1", "t1-a1.json"):
        pass  # marked, as the run marks a call before its step file
    again = spawn_step(run, "build.1", attempt=2)
    wake = StepWake.open(run)
    assert wake is not None
    with wake:
        packet = later(0.05, lambda: write_packet(run, again, PACKET))
        timer = later(0.3, lambda: write_step_file(run, step))
        woken, took = timed_wait(wake, LONG)
        packet.join()
        timer.join()
    assert woken and 0.2 <= took < LONG / 2  # not the packet's 0.05 s


def test_a_new_calls_step_ends_the_wait_and_its_packet_alone_does_not(
    run: RunDir, holder: ProcessLock, wake: StepWake
) -> None:
    """spec: CMD-NEXT-11. A call unknown when the wait began: its directory and
    packet wake nobody; its step file, renamed in once its directory is watched,
    ends the wait."""
    step = spawn_step(run, "build.1")
    write_packet(run, step, PACKET)  # the call's directory and its packet
    woken, _ = timed_wait(wake, QUIET)
    assert not woken
    timer = later(0.1, lambda: write_step_file(run, step))
    woken, took = timed_wait(wake, LONG)
    timer.join()
    assert woken and took < LONG / 2


def test_a_step_renamed_in_before_its_directory_was_watched_is_found(
    run: RunDir, holder: ProcessLock, wake: StepWake
) -> None:
    """spec: CMD-NEXT-11. The directory, its packet and its step file all come
    before the wake reads the directory's creation: the directory is looked at
    when it is watched, and the step found there ends the wait."""
    write_step(run, spawn_step(run, "build.1"), PACKET)
    woken, took = timed_wait(wake, LONG)
    assert woken and took < LONG / 2


def test_a_step_there_when_the_wake_opens_ends_its_first_wait(
    run: RunDir, holder: ProcessLock
) -> None:
    """spec: CMD-NEXT-11. A step renamed in after the reader's read and before its
    wake watched the directory: the first wait ends at once, the next one waits."""
    write_step(run, spawn_step(run, "build.1"), PACKET)
    wake = StepWake.open(run)
    assert wake is not None
    with wake:
        woken, took = timed_wait(wake, LONG)
        assert woken and took < LONG / 2
        assert not timed_wait(wake, QUIET)[0]


def test_a_close_step_ends_the_wait(run: RunDir, holder: ProcessLock) -> None:
    """spec: CMD-NEXT-11. A close step written in a watched call directory."""
    write_step(run, spawn_step(run, "build.1"), PACKET)
    wake = StepWake.open(run)
    assert wake is not None
    with wake:
        timer = later(0.1, lambda: write_close(run, "build.1", 1, "agent-1", durable=False))
        woken, took = timed_wait(wake, LONG)
        timer.join()
    assert woken and took < LONG / 2


def test_a_run_no_process_holds_is_woken_by_a_directory_made_during_the_wait(
    run: RunDir, wake: StepWake
) -> None:
    """spec: CMD-NEXT-11. Without an index the directories made during the wait
    are watched (a resumed process's first steps)."""
    step = spawn_step(run, "build.1")
    write_packet(run, step, PACKET)
    assert not timed_wait(wake, QUIET)[0]
    timer = later(0.1, lambda: write_step_file(run, step))
    woken, took = timed_wait(wake, LONG)
    timer.join()
    assert woken and took < LONG / 2


def test_a_closed_wake_keeps_its_descriptor_for_the_next(run: RunDir) -> None:
    """Closing a descriptor that held a watch waits for the kernel's grace period:
    the next wake of the process takes the one the last left."""
    first = StepWake.open(run)
    assert first is not None
    descriptor = first._inotify
    first.close()
    second = StepWake.open(run)
    assert second is not None
    with second:
        assert second._inotify is descriptor
