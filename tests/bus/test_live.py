"""The index of the call directories that may hold a step: what a reader of a live
session run lists, and that it never hides a step or close step."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from crw.bus import live
from crw.bus.ended import seal
from crw.bus.inbox import Report, write_report
from crw.bus.steps import (
    list_bus,
    remove_close,
    retract_step,
    step_paths,
    write_close,
    write_packet,
    write_step,
    write_step_file,
)
from crw.clock import system_clock
from crw.engine.run.locks import ProcessLock, take_process_lock
from crw.engine.run.rundir import RunDir
from tests.bus.test_steps import PACKET, spawn_step


async def no_answer(report: Report) -> None:
    """A run that answers no report itself (every report waits for its call)."""


@pytest.fixture
def run(tmp_path: Path) -> RunDir:
    run = RunDir.of(tmp_path / "state", "r1")
    run.create()
    return run


@pytest.fixture
def holder(run: RunDir) -> Iterator[ProcessLock]:
    """The run's process lock, held, and an index kept under its token."""
    lock = take_process_lock(run)
    assert lock is not None
    live.open_index(run, lock.token)
    yield lock
    live.close_index(run)
    lock.release()


def ran_calls(run: RunDir, calls: int) -> None:
    """`calls` calls that each published a step, bound it (the step file retracted,
    the packet kept) and had their subagent closed by the owner."""
    for i in range(calls):
        call = f"n{i}.1"
        write_step(run, spawn_step(run, call), PACKET)
        retract_step(run, call, 1, 1)
        write_close(run, call, 1, f"thread-{i}")
        remove_close(run, call, 1, f"thread-{i}")


def listings(monkeypatch: pytest.MonkeyPatch, run: RunDir) -> list[str]:
    listed: list[str] = []
    listdir, scandir = os.listdir, os.scandir

    def count_listdir(path: Any = ".") -> Any:
        listed.append(str(path))
        return listdir(path)

    def count_scandir(path: Any = ".") -> Any:
        listed.append(str(path))
        return scandir(path)

    monkeypatch.setattr(os, "listdir", count_listdir)
    monkeypatch.setattr(os, "scandir", count_scandir)
    return listed


def looks(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The files the holder stats (`os.path.exists`) from now on, by name."""
    looked: list[str] = []
    exists = os.path.exists

    def count_exists(path: Any) -> bool:
        looked.append(os.path.basename(path))
        return exists(path)

    monkeypatch.setattr(os.path, "exists", count_exists)
    return looked


def marked(run: RunDir) -> list[str]:
    """The calls the index marks, as a reader reads them."""
    calls = live.live_calls(run)
    assert calls is not None
    return sorted(Path(p).name for p in calls)


def test_a_read_of_a_held_run_lists_only_the_calls_that_may_hold_a_step(
    run: RunDir, holder: ProcessLock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: CMD-NEXT-1, STEP-28: a run keeps a directory per call it ran; a read of
    its bus lists the index and the calls with a step or close step waiting, not the
    thirty calls that are done, and sees every waiting step and close."""
    ran_calls(run, 30)
    live.sweep(run)  # the owner took the closes: the holder unmarks their calls
    write_step(run, spawn_step(run, "w.1"), PACKET)
    write_close(run, "c.1", 1, "thread-c")
    listed = listings(monkeypatch, run)
    steps, closes = list_bus(run)
    assert [s.call for s in steps] == ["w.1"] and [c.agent_id for c in closes] == ["thread-c"]
    assert sorted(Path(p).name for p in listed if p.startswith(str(run.steps))) == ["c.1", "w.1"]


def test_a_call_is_unmarked_only_once_its_directory_holds_no_step_or_close(
    run: RunDir, holder: ProcessLock
) -> None:
    """spec: STEP-21, STEP-28: marked before its files are written; a retracted step
    unmarks it; a close the owner took stays marked until the holder's sweep."""
    write_step(run, spawn_step(run, "a.1"), PACKET)
    assert marked(run) == ["a.1"]
    write_close(run, "a.1", 1, "thread-a")
    retract_step(run, "a.1", 1, 1)
    assert marked(run) == ["a.1"]  # its close is still there
    remove_close(run, "a.1", 1, "thread-a")  # the owner's next: a reader never unmarks
    assert marked(run) == ["a.1"]
    live.sweep(run)
    assert marked(run) == []
    assert step_paths(run, "a.1", 1, 1)[0].exists()  # the packet stays


def test_a_step_file_written_after_a_sweep_unmarked_its_call_marks_it_again(
    run: RunDir, holder: ProcessLock
) -> None:
    """spec: STEP-21: a step's packet and its step file are written apart (the
    packet in a worker thread, the file in the loop's); a sweep between them may
    unmark the call, whose directory holds no step yet. The step file marks it
    again before it is written: a reader never misses it."""
    write_close(run, "a.1", 1, "thread-old")  # the attempt before
    step = spawn_step(run, "a.1", attempt=2)
    write_packet(run, step, PACKET)
    remove_close(run, "a.1", 1, "thread-old")  # the owner's next
    live.sweep(run)
    assert marked(run) == []
    write_step_file(run, step)
    assert marked(run) == ["a.1"]
    assert [s.marker for s in list_bus(run)[0]] == [step.marker]


def test_a_calls_packet_alone_does_not_mark_it_and_no_read_lists_its_directory(
    run: RunDir, holder: ProcessLock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: STEP-21: a new call's packet is written (and synced) before its step
    file; a read meanwhile has no step there to find, so the index does not mark
    the call until its step file is written, and the read lists no directory."""
    step = spawn_step(run, "a.1")
    write_packet(run, step, PACKET)
    assert marked(run) == []
    listed = listings(monkeypatch, run)
    assert list_bus(run) == ([], [])
    assert [p for p in listed if p.startswith(str(run.steps))] == []
    write_step_file(run, step)
    assert marked(run) == ["a.1"]
    assert [s.marker for s in list_bus(run)[0]] == [step.marker]


def test_a_sweep_stats_only_the_close_steps_it_wrote_and_lists_no_directory(
    run: RunDir, holder: ProcessLock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: STEP-28: the holder retracts its step files itself (and unmarks their
    calls then); only a close step is removed by another process, the owner's
    `next`. A sweep stats the close steps it wrote and has not seen gone, once
    each, and lists no directory (it listed each such call's, packets and all),
    nor looks at the calls whose step files alone mark them."""
    for i in range(5):  # calls in flight: their steps wait to be bound
        write_step(run, spawn_step(run, f"w{i}.1"), PACKET)
    ran_calls(run, 3)  # closes written, taken by the owner
    write_close(run, "c.1", 1, "thread-c")  # a close the owner has not taken yet
    listed, looked = listings(monkeypatch, run), looks(monkeypatch)
    live.sweep(run)
    assert listed == []
    assert sorted(looked) == [f"close-a1-thread-{t}.json" for t in ("0", "1", "2", "c")]
    assert sorted(Path(p).name for p in live.live_calls(run) or []) == sorted(
        ["c.1", *(f"w{i}.1" for i in range(5))]
    )
    looked.clear()
    live.sweep(run)  # the unmarked calls are swept no more
    assert looked == ["close-a1-thread-c.json"]
    remove_close(run, "c.1", 1, "thread-c")
    live.sweep(run)
    looked.clear()
    live.sweep(run)
    assert looked == [] and listed == []


def test_a_report_unmarks_the_taken_close_steps_at_once_and_looks_at_each_once(
    run: RunDir, holder: ProcessLock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: STEP-28: the `next` that handed out a reported step removed every close
    step there was when it read. A report unmarks the calls of the close steps
    written since the last report whose files are gone (a stat of each), not at
    the next sweep; one still there stays marked and is the sweep's, not looked
    at again for a report."""
    for t in ("0", "1"):
        write_close(run, f"c{t}.1", 1, f"thread-{t}")
        remove_close(run, f"c{t}.1", 1, f"thread-{t}")  # the owner's next took them
    write_close(run, "kept.1", 1, "thread-kept")  # written after that next read
    write_step(run, spawn_step(run, "w.1"), PACKET)
    looked = looks(monkeypatch)
    live.reported(run)
    assert sorted(looked) == [f"close-a1-thread-{t}.json" for t in ("0", "1", "kept")]
    assert marked(run) == ["kept.1", "w.1"]
    looked.clear()
    live.reported(run)  # another report: nothing written since to look at
    write_close(run, "late.1", 1, "thread-late")
    remove_close(run, "late.1", 1, "thread-late")
    live.reported(run)
    assert looked == ["close-a1-thread-late.json"]
    assert marked(run) == ["kept.1", "w.1"]
    remove_close(run, "kept.1", 1, "thread-kept")
    live.sweep(run)
    assert marked(run) == ["w.1"]
    write_close(run, "z.1", 1, "thread-z")
    remove_close(run, "z.1", 1, "thread-z")
    live.sweep(run)  # no report came: the sweep unmarked it, and a report looks no more
    assert marked(run) == ["w.1"] and not live._indexes[run.steps].closed


def test_a_retracted_step_unmarks_its_call_without_a_look_at_its_directory(
    run: RunDir, holder: ProcessLock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: STEP-21: the bound step's file was the one file of its call's
    directory the holder wrote and had not removed: its retraction unmarks the
    call with neither a listing (the directory holds its packet) nor a stat; a
    call whose close step the holder wrote stays marked, its close statted."""
    write_step(run, spawn_step(run, "a.1"), PACKET)
    write_step(run, spawn_step(run, "b.1"), PACKET)
    write_close(run, "b.1", 1, "thread-old")  # the attempt before, not yet taken
    listed, looked = listings(monkeypatch, run), looks(monkeypatch)
    retract_step(run, "a.1", 1, 1)
    assert listed == [] and looked == []
    retract_step(run, "b.1", 1, 1)
    assert listed == [] and looked == ["close-a1-thread-old.json"]
    assert marked(run) == ["b.1"]


def test_a_directory_an_earlier_process_left_is_listed_until_unmarked(
    run: RunDir, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: STEP-21, STEP-28: the files of a call found marked when the index
    was opened are not all the holder's: its directory is listed, not statted,
    until the holder unmarks it; the call's later files are then its own."""
    write_close(run, "b.1", 1, "thread-b")  # an earlier process's
    lock = take_process_lock(run)
    assert lock is not None
    try:
        live.open_index(run, lock.token)
        listed = listings(monkeypatch, run)
        live.sweep(run)
        assert [Path(p).name for p in listed] == ["b.1"] and marked(run) == ["b.1"]
        remove_close(run, "b.1", 1, "thread-b")
        live.sweep(run)
        assert marked(run) == []
        write_step(run, spawn_step(run, "b.1", k=2), PACKET)
        listed.clear()
        retract_step(run, "b.1", 2, 1)
        assert listed == [] and marked(run) == []
    finally:
        live.close_index(run)
        lock.release()


def test_an_index_no_process_holds_is_never_trusted(
    run: RunDir, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: CMD-NEXT-1: after its process is gone (a crash, a power loss that took
    part of the index), a reader lists every call's directory and misses no step."""
    lock = take_process_lock(run)
    assert lock is not None
    live.open_index(run, lock.token)
    write_step(run, spawn_step(run, "a.1"), PACKET)
    live.close_index(run)
    lock.release()
    (run.steps / f"{live.PREFIX}{lock.token}").write_bytes(b"")  # a power loss took it
    assert [s.call for s in list_bus(run)[0]] == ["a.1"]


def test_an_index_opened_on_a_run_with_steps_marks_them(run: RunDir) -> None:
    """spec: STEP-21: a resumed process indexes the steps and closes an earlier
    process left before it writes any: a reader sees them through its index."""
    write_step(run, spawn_step(run, "a.1"), PACKET)
    write_close(run, "b.1", 1, "thread-b")
    ran_calls(run, 3)
    lock = take_process_lock(run)
    assert lock is not None
    try:
        live.open_index(run, lock.token)
        assert live.live_calls(run) is not None
        assert sorted(Path(p).name for p in live.live_calls(run) or []) == ["a.1", "b.1"]
        steps, closes = list_bus(run)
        assert [s.call for s in steps] == ["a.1"] and [c.call for c in closes] == ["b.1"]
        remove_close(run, "b.1", 1, "thread-b")  # the owner took the earlier close
        live.sweep(run)
        assert [Path(p).name for p in live.live_calls(run) or []] == ["a.1"]
    finally:
        live.close_index(run)
        lock.release()


def test_a_call_being_written_holds_back_no_other_call(run: RunDir, holder: ProcessLock) -> None:
    """spec: STEP-21: the index's lock is a call's: while one call's step is being
    written (the lock held), another call's step is written at once."""
    import threading

    other = next(
        f"b{i}.1" for i in range(100) if live._call_lock(f"b{i}.1") is not live._call_lock("a.1")
    )
    written = threading.Event()

    def write_other() -> None:
        write_step(run, spawn_step(run, other), PACKET)
        written.set()

    with live.writing(run, "a.1", "t1-a1.json"):
        threading.Thread(target=write_other).start()
        assert written.wait(10)
    assert [s.call for s in list_bus(run)[0]] == [other]


async def test_the_inbox_of_the_holding_process_keeps_and_sweeps_the_index(
    run: RunDir, autojump_clock: Any
) -> None:
    """spec: STEP-28, CMD-NEXT-1: the run's inbox indexes the bus before any step is
    written (a step an earlier process left is marked), and within SWEEP_POLLS reads
    after the owner took a close step its call is no longer marked."""
    import trio

    from crw.actors.inbox import SWEEP_POLLS, Inbox
    from crw.settings import DEFAULT_SETTINGS

    write_step(run, spawn_step(run, "left.1"), PACKET)  # an earlier process's
    lock = take_process_lock(run)
    assert lock is not None
    inbox = Inbox(run, "r1", DEFAULT_SETTINGS, no_answer, token=lock.token)
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(inbox.run)
            assert sorted(Path(p).name for p in live.live_calls(run) or []) == ["left.1"]
            await trio.to_thread.run_sync(write_close, run, "c.1", 1, "thread-c")
            remove_close(run, "c.1", 1, "thread-c")  # the owner's next took it
            assert "c.1" in [Path(p).name for p in live.live_calls(run) or []]
            await trio.sleep(DEFAULT_SETTINGS.inbox_poll * (SWEEP_POLLS + 1))
            assert [Path(p).name for p in live.live_calls(run) or []] == ["left.1"]
            # A report: the closes its next took are unmarked at once, no sweep waited for.
            await trio.to_thread.run_sync(write_close, run, "d.1", 1, "thread-d")
            await trio.to_thread.run_sync(write_step, run, spawn_step(run, "s.1"), PACKET)
            remove_close(run, "d.1", 1, "thread-d")  # the next that handed out s.1's step
            write_report(run, Report.new("r1", "s.1", 1, 1, "agent-s", system_clock()))
            await trio.sleep(DEFAULT_SETTINGS.inbox_poll)
            assert sorted(Path(p).name for p in live.live_calls(run) or []) == ["left.1", "s.1"]
            nursery.cancel_scope.cancel()
        assert live.live_calls(run) is not None  # its process still holds the lock
        assert run.steps not in live._indexes  # but keeps it no more
    finally:
        lock.release()
    assert live.live_calls(run) is None


def test_the_index_makes_no_file_per_call_and_stays_as_small_as_its_marks(
    run: RunDir, holder: ProcessLock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: STEP-28, CMD-NEXT-1: marking and unmarking a call is a line appended to
    one file (a file made and removed per call cost two inodes made and two freed
    a call, each made one scanning past those freed in the last 30 s on this
    machine's ext4); the log is rewritten with the marks alone as it grows, so a
    reader reads no more than COMPACT_LINES lines beyond twice the marks."""
    made: list[str] = []
    real_open = os.open

    def counting_open(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if flags & os.O_CREAT and Path(path).name.lstrip(".").startswith(live.LINK):
            made.append(str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", counting_open)
    write_step(run, spawn_step(run, "w.1"), PACKET)  # one call stays marked throughout
    ran_calls(run, 600)
    live.sweep(run)
    index = run.steps / f"{live.PREFIX}{holder.token}"
    lines = index.read_bytes().splitlines()
    assert len(made) <= 600 * 4 // live.COMPACT_LINES + 1  # the compactions' files alone
    assert len(lines) <= live.COMPACT_LINES + 2
    assert marked(run) == ["w.1"]


def test_a_line_the_holder_does_not_write_makes_the_index_untrusted(
    run: RunDir, holder: ProcessLock
) -> None:
    """spec: CMD-NEXT-1: a damaged index (a byte changed, two lines run together) is
    not trusted: the reader lists every call's directory and misses no step; a line
    still being written (no newline yet) is not read, the rest is."""
    write_step(run, spawn_step(run, "a.1"), PACKET)
    write_step(run, spawn_step(run, "b.1"), PACKET)
    index = run.steps / f"{live.PREFIX}{holder.token}"
    good = index.read_bytes()
    index.write_bytes(good + b"+c.1")  # being written: c.1's files come after it
    assert marked(run) == ["a.1", "b.1"]
    index.write_bytes(good.replace(b"+b.1\n", b"+a.1+b.1\n"))
    assert live.live_calls(run) is None
    assert [s.call for s in list_bus(run)[0]] == ["a.1", "b.1"]


def test_an_index_that_cannot_be_written_is_given_up_and_no_step_is_hidden(
    run: RunDir, holder: ProcessLock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: STEP-21, CMD-NEXT-1: a mark that cannot be written (a full disk) stops
    the holder keeping the index, its link removed first: the step is written and a
    reader, listing every directory, sees it."""
    import errno

    write_step(run, spawn_step(run, "a.1"), PACKET)

    def full(fd: int, data: bytes) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(live, "_write_all", full)
    write_step(run, spawn_step(run, "b.1"), PACKET)
    assert live.live_calls(run) is None and not (run.steps / live.LINK).is_symlink()
    assert run.steps not in live._indexes
    assert [s.call for s in list_bus(run)[0]] == ["a.1", "b.1"]


def test_an_older_crws_index_directory_is_not_trusted(run: RunDir, holder: ProcessLock) -> None:
    """spec: CMD-NEXT-1: an index an older crw keeps (a directory of one file per
    call) is not read as this one: every call's directory is listed."""
    write_step(run, spawn_step(run, "a.1"), PACKET)
    live.close_index(run)
    index = run.steps / f"{live.PREFIX}{holder.token}"
    index.unlink()
    index.mkdir()
    assert live.live_calls(run) is None
    assert [s.call for s in list_bus(run)[0]] == ["a.1"]


def test_an_ended_runs_read_lists_only_the_calls_its_sealed_index_marks(
    run: RunDir, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: CMD-NEXT-1, CMD-NEXT-15: once the ended row is durable no process writes
    a step again, and the holder keeps its index as `steps/.ended`: a read of the
    ended run, its process gone, lists the calls whose close steps may wait (here
    one), not the thirty done (140-200 ms of listings at 10,000 calls)."""
    lock = take_process_lock(run)
    assert lock is not None
    live.open_index(run, lock.token)
    ran_calls(run, 30)
    live.sweep(run)
    write_close(run, "c.1", 1, "thread-c")
    seal(run)
    live.close_index(run)
    lock.release()
    assert live.live_calls(run) is None
    listed = listings(monkeypatch, run)
    assert [c.agent_id for c in list_bus(run)[1]] == ["thread-c"]
    assert [Path(p).name for p in listed] == ["c.1"]


def test_a_damaged_ended_index_is_not_trusted_and_a_new_holder_drops_it(
    run: RunDir, holder: ProcessLock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: CMD-NEXT-1: a line `seal` does not write makes every call's directory
    listed (no close step missed); a process that takes the run removes the ended
    index before it writes a step (none does for an ended run: never stale)."""
    write_close(run, "c.1", 1, "thread-c")
    write_step(run, spawn_step(run, "w.1"), PACKET)
    seal(run)
    ended = run.steps / live.ENDED
    assert ended.read_bytes() == b"+c.1\n+w.1\n"
    live.close_index(run)
    ended.write_bytes(b"+c.1\n+w.1 \n")
    assert live.ended_calls(run) is None
    assert [c.call for c in list_bus(run)[1]] == ["c.1"]
    live.open_index(run, holder.token)
    assert not ended.exists()


def test_an_ended_index_that_cannot_be_written_is_warned_about_and_every_directory_listed(
    run: RunDir, holder: ProcessLock, monkeypatch: pytest.MonkeyPatch, caplog: Any
) -> None:
    """spec: CMD-NEXT-1: a full disk at the end leaves no `.ended` (nor its
    temporary file) and a warning; a read of the ended run lists every call."""
    import errno

    write_close(run, "c.1", 1, "thread-c")

    def full(fd: int, data: Any) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", full)
    seal(run)
    monkeypatch.undo()
    assert "cannot keep the ended run's step index" in caplog.text
    assert sorted(p.name for p in run.steps.iterdir() if p.name.startswith(".")) == [
        ".live",
        f"{live.PREFIX}{holder.token}",
    ]
    live.close_index(run)
    holder.release()
    assert live.ended_calls(run) is None
    assert [c.call for c in list_bus(run)[1]] == ["c.1"]


def test_a_reader_parses_only_the_index_lines_appended_since_its_last_read(
    run: RunDir, holder: ProcessLock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: CMD-NEXT-1: an owner reads the bus at every `next`; the index it read
    before is not parsed again, only the lines the holder appended since; an index
    rewritten meanwhile (its bytes read before changed) is parsed whole."""
    monkeypatch.setattr(live, "_reads", {})
    parsed: list[bytes] = []
    line = live._LINE

    class Counted:
        def fullmatch(self, text: bytes) -> Any:
            parsed.append(text)
            return line.fullmatch(text)

    monkeypatch.setattr(live, "_LINE", Counted())
    ran_calls(run, 10)
    live.sweep(run)
    index = run.steps / f"{live.PREFIX}{holder.token}"
    lines = index.read_bytes().count(b"\n")
    assert marked(run) == [] and len(parsed) == lines == 40
    write_step(run, spawn_step(run, "w.1"), PACKET)
    assert marked(run) == ["w.1"] and len(parsed) == 41
    assert marked(run) == ["w.1"] and len(parsed) == 41
    data = index.read_bytes()
    last = data.rfind(b"-n0.1\n")  # n0.1's sweep: now a mark
    index.write_bytes(data[:last] + b"+" + data[last + 1 :])
    assert marked(run) == ["n0.1", "w.1"] and len(parsed) == 82
