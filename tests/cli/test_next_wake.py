"""`crw flow next --wait` woken by the run's writes: a step or close file the run
writes during the wait, or a row that changes the run's state, is answered at
once, not at the next poll; a wake lost is made good by the poll.

next runs in this process with a clock whose sleep only moves the time on and
whose wait on the wake's descriptor makes the test's write first, then looks at
the descriptor for real: an answer that came with no time passed came by the
wake (a wait without one would have slept a poll's time). The kernel queues an
inotify event within the write's own syscall, so the look need not wait."""

from __future__ import annotations

import json
import select
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from crw.bus import live, stepwake
from crw.bus import steps as bus
from crw.cli.owner import next as next_module
from crw.engine.run.locks import hold_run
from crw.engine.run.rundir import RunDir
from crw.engine.steps.markers import marker, op
from tests.cli.conftest import Crw
from tests.cli.test_next import RUN, _append_rows, _make_run, bind_line
from tests.cli.test_next_window import FakeClock


class WakeClock(FakeClock):
    """A FakeClock whose wait on a descriptor makes the next write of `during`
    first (one a wait), then looks whether the descriptor is readable when
    `wakes` (no fake time passes when it is), and sleeps the wait's seconds when
    it is not, or when not `wakes` (a wake lost)."""

    def __init__(self, *, wakes: bool = True) -> None:
        super().__init__()
        self.wakes = wakes
        self.during: list[Callable[[], object]] = []
        self.slept: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.slept.append(round(seconds, 6))
        super().sleep(seconds)

    def readable(self, fd: int, seconds: float) -> bool:
        if self.during:
            self.during.pop(0)()
        if self.wakes:
            poller = select.poll()
            poller.register(fd, select.POLLIN)
            if poller.poll(0):
                return True
        self.sleep(seconds)
        return False

    def clock(self) -> next_module.Clock:
        clock = super().clock()
        return next_module.Clock(
            monotonic=clock.monotonic,
            sleep=clock.sleep,
            time_ns=clock.time_ns,
            readable=self.readable,
        )


@pytest.fixture(autouse=True)
def no_kept_wakes() -> Iterator[None]:
    """Each test opens its own wake; those kept are closed after it."""
    yield
    with stepwake._kept_lock:
        kept, stepwake._kept = list(stepwake._kept.values()), {}
    for wake in kept:
        wake._inotify.close()


@pytest.fixture
def indexed(crw: Crw) -> Iterator[RunDir]:
    """A run this test process holds, as its run process would: its started row
    names the process lock, the owner's line is bound and it keeps the live
    index of its call directories (`crw.bus.live`)."""
    run = _make_run(crw)
    with hold_run(run) as process:
        assert process is not None
        _append_rows(run, {"row": "started", "backend": "session", "process": process.token})
        bind_line(crw, {"kind": "orchestrator", "run_id": RUN, "helperPairs": _pairs()})
        live.open_index(run, process.token)
        try:
            yield run
        finally:
            live.close_index(run)


def _pairs() -> dict[str, Any]:
    from crw.engine.config.role_names import ROLES, default_agent_type

    return {role: {"agent_type": default_agent_type(role)} for role in ROLES}


def _publish(run: RunDir, call: str, k: int = 1, attempt: int = 1) -> None:
    """Write a spawn step as the run does: its directory, packet, mark, file."""
    packet, _ = bus.step_paths(run, call, k, attempt)
    step = bus.StepFile(
        call=call,
        k=k,
        attempt=attempt,
        op=op(call, k),
        marker=marker(call, k, attempt),
        role="executor",
        action="spawn",
        agent_type="executor",
        model=None,
        reasoning_effort=None,
        message=f"crw-flow-op: {marker(call, k, attempt)}\nCRW-ROLE: executor\n",
        packet=str(packet),
        workspace="/work/p",
        agent_id=None,
    )
    bus.write_step(run, step, "# packet\n")


def _wait(crw: Crw, clock: FakeClock, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    code = next_module.next_command(
        RUN, wait=5.0, state=str(crw.state), json=True, clock=clock.clock()
    )
    assert code == 0
    answer: dict[str, Any] = json.loads(capsys.readouterr().out)
    return answer


def test_a_step_published_during_a_wait_is_answered_at_its_wake(
    crw: Crw, indexed: RunDir, capsys: pytest.CaptureFixture[str]
) -> None:
    """spec: CMD-NEXT-11. A new call's step (its directory made and marked in the
    index during the wait) is answered with no time passed: no poll waited for."""
    clock = WakeClock()
    clock.during.append(lambda: _publish(indexed, "build.1"))
    answer = _wait(crw, clock, capsys)
    assert [step["call"] for step in answer["steps"]] == ["build.1"]
    assert (clock.elapsed, clock.slept) == (0.0, [])


def test_a_close_step_in_a_marked_calls_directory_is_answered_at_its_wake(
    crw: Crw, indexed: RunDir, capsys: pytest.CaptureFixture[str]
) -> None:
    """spec: CMD-NEXT-11. The call is marked already (the index does not change):
    its directory's own watch wakes the wait."""
    bus.write_close(indexed, "build.1", 1, "agent-a", durable=False)
    bus.remove_close(indexed, "build.1", 1, "agent-a")  # taken; the call stays marked
    index = (indexed.steps / live.LINK).resolve().read_bytes()
    clock = WakeClock()
    clock.during.append(lambda: bus.write_close(indexed, "build.1", 1, "agent-b", durable=False))
    answer = _wait(crw, clock, capsys)
    assert (indexed.steps / live.LINK).resolve().read_bytes() == index
    assert [(s["action"], s["agent_id"]) for s in answer["steps"]] == [("close", "agent-b")]
    assert (clock.elapsed, clock.slept) == (0.0, [])


def test_a_row_that_changes_the_state_is_answered_at_its_wake(
    crw: Crw, indexed: RunDir, capsys: pytest.CaptureFixture[str]
) -> None:
    """spec: CMD-NEXT-11. The journal's append wakes the wait, and the state it
    folds to is not the one waited in."""
    ended = {"row": "ended", "status": "completed", "state": {"build": "completed"}}
    clock = WakeClock()
    clock.during.append(lambda: _append_rows(indexed, ended))
    answer = _wait(crw, clock, capsys)
    assert (answer["state"], answer["ended_status"]) == ("ended", "completed")
    assert (clock.elapsed, clock.slept) == (0.0, [])


def test_a_lost_wake_is_made_good_by_the_poll(
    crw: Crw, indexed: RunDir, capsys: pytest.CaptureFixture[str]
) -> None:
    """spec: CMD-NEXT-11. A wake that never comes (its events lost) costs a poll:
    the step is answered at the read POLL seconds in."""
    clock = WakeClock(wakes=False)
    clock.during.append(lambda: _publish(indexed, "build.1"))
    answer = _wait(crw, clock, capsys)
    assert [step["call"] for step in answer["steps"]] == ["build.1"]
    assert clock.slept == [next_module.POLL]


def test_a_row_that_leaves_the_state_is_no_read_of_the_bus(
    crw: Crw,
    indexed: RunDir,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """spec: CMD-NEXT-11. Rows that keep the run running wake the wait, fold the
    journal and wait on: the bus is read at the wait's start and at the poll."""
    reads = _count_reads(monkeypatch)
    prepared = {"row": "prepared", "call": "review.1", "node": "review", "role": "reviewer"}
    clock = WakeClock()
    clock.during += [lambda: _append_rows(indexed, prepared), lambda: _publish(indexed, "build.1")]
    answer = _wait(crw, clock, capsys)
    assert [step["call"] for step in answer["steps"]] == ["build.1"]
    assert clock.slept == []
    assert len(reads) == 3  # next's first read, the wait's start, the step's wake


def test_an_index_change_that_brings_no_file_is_no_read_of_the_bus(
    crw: Crw,
    indexed: RunDir,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """spec: CMD-NEXT-11. The holder unmarks a call whose close step was taken: the
    index's change wakes the wait, which watches no directory anew and reads
    nothing; the next step's file is read at its own wake."""
    reads = _count_reads(monkeypatch)
    bus.write_close(indexed, "build.1", 1, "agent-a", durable=False)
    bus.remove_close(indexed, "build.1", 1, "agent-a")  # taken; the call stays marked
    clock = WakeClock()
    clock.during += [lambda: live.sweep(indexed), lambda: _publish(indexed, "review.1")]
    answer = _wait(crw, clock, capsys)
    assert b"-build.1\n" in (indexed.steps / live.LINK).resolve().read_bytes()
    assert [step["call"] for step in answer["steps"]] == ["review.1"]
    assert clock.slept == []
    assert len(reads) == 3  # next's first read, the wait's start, the step's wake


def _count_reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """A list that gets an item at each read of the bus by next."""
    reads: list[int] = []
    read_bus = bus.read_bus

    def counted(run: RunDir) -> bus.Bus:
        reads.append(1)
        return read_bus(run)

    monkeypatch.setattr(next_module, "read_bus", counted)
    return reads
