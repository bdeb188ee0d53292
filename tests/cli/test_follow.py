"""The wake `show --follow` and `watch` sleep on: an inotify watch of the run's
directory that wakes on the journal's appends and on a lock let go, not a poll."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

from crw.cli.read.follow import JournalTail, RunWake
from crw.engine.run.rundir import RunDir
from crw.journal.log import encode_batch, encode_body
from crw.journal.rows import Completed, Ended, Prepared, RowModel
from tests.cli.test_status import _journal_line

LONG = 30.0
"""The wait's timeout: a wake well before it is the event's."""


def woken_by(run: RunDir, event: Callable[[], None]) -> float:
    """Seconds a `wait(LONG)` slept when `event` happened a moment after it began."""
    with RunWake(run) as wake:
        began = time.monotonic()
        sleeper = threading.Thread(target=wake.wait, args=(LONG,))
        sleeper.start()
        time.sleep(0.2)
        event()
        sleeper.join(LONG + 5)
        return time.monotonic() - began


def made(tmp_path: Path) -> RunDir:
    run = RunDir(tmp_path / "flow" / "r")
    run.create()
    return run


def test_an_append_to_the_journal_wakes_it_and_the_tail_reads_the_new_rows(
    tmp_path: Path,
) -> None:
    run = made(tmp_path)
    tail = JournalTail(run.journal)
    assert tail.read() == []

    with open(run.journal, "a") as journal:  # the run's writer keeps it open

        def append() -> None:
            journal.write(_journal_line(1, "started", backend="session"))
            journal.flush()

        assert woken_by(run, append) < 5
    assert [row["row"] for row in tail.read()] == ["started"]
    assert tail.read() == [] and tail.state.state == "running" and not tail.ended


def test_a_lock_let_go_wakes_it(tmp_path: Path) -> None:
    """A run process that exits or is killed closes the run lock it opened to write."""
    run = made(tmp_path)
    run.run_lock.touch()
    holder = os.open(run.run_lock, os.O_RDWR)  # as filelock opens it
    assert woken_by(run, lambda: os.close(holder)) < 5


def test_other_files_of_the_run_do_not_wake_it(tmp_path: Path) -> None:
    run = made(tmp_path)
    with RunWake(run) as wake:
        began = time.monotonic()
        with open(run.log, "a") as log:
            log.write("a line of the run's log\n")
        wake.wait(1.0)
        assert time.monotonic() - began >= 0.9


def test_the_tail_reads_a_journal_in_pieces_of_whole_batches(tmp_path: Path) -> None:
    """Pieces of a few bytes, or of batches larger than a piece, read the rows a
    whole read does, in order, each batch once; a torn tail is left as by `read`."""
    batches: list[list[RowModel]] = [
        [Prepared(call=f"a.{n}", node="a"), Completed(call=f"a.{n}", result={"x": "y" * n * 50})]
        for n in range(1, 40)
    ]
    batches.append([Ended(status="completed")])
    data, seq = b"", 1
    for batch in batches:
        data += encode_batch(seq, "2026-12-06T00:00:00.000000Z", [encode_body(r) for r in batch])
        seq += len(batch)
    journal = tmp_path / "journal.jsonl"
    journal.write_bytes(data + data[:40].replace(b"\n", b" "))  # and a torn tail
    whole = JournalTail(journal)
    expected = whole.read()
    for size in (1, 100, 1000, len(data)):
        tail = JournalTail(journal)
        pieces = list(tail.pieces(size))
        assert [row for piece in pieces for row in piece] == expected
        assert tail.ended and tail.state.calls.keys() == whole.state.calls.keys()
        assert (tail.offset, tail.last_seq, tail.torn) == (whole.offset, whole.last_seq, whole.torn)
        assert size == len(data) or len(pieces) > 1
