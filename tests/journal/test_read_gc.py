"""What a read and a replay leave the garbage collector: the rows they build counted
as old, so no collection passes over them the moment it runs again."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from crw.journal.log import encode_batch, encode_body, read_journal
from crw.journal.replay import replay
from crw.journal.rows import Completed, Prepared, Tokens

STAMP = "2026-11-29T19:35:51.123456Z"


def _journal(path: Path, calls: int) -> None:
    """A journal of `calls` calls, each prepared and completed with a result: rows
    the collector tracks (they hold lists and dicts)."""
    batches = []
    for n in range(calls):
        call = f"c{n}"
        rows = [
            Prepared(call=call, node="n", role="executor"),
            Completed(call=call, result={"files": ["a.py"]}, tokens=Tokens(total=n)),
        ]
        batches.append(encode_batch(2 * n + 1, STAMP, [encode_body(rows[0])]))
        batches.append(encode_batch(2 * n + 2, STAMP, [encode_body(rows[1])]))
    path.write_bytes(b"".join(batches))


@pytest.fixture
def collections() -> Iterator[list[int]]:
    """The generation of each collection that starts from now on."""
    started: list[int] = []

    def collecting(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            started.append(info["generation"])

    gc.collect()
    gc.callbacks.append(collecting)
    try:
        yield started
    finally:
        gc.callbacks.remove(collecting)


def _in_oldest_generation(obj: object) -> bool:
    return any(other is obj for other in gc.get_objects(generation=2))


def test_the_rows_a_read_builds_are_old_and_not_collected_when_it_ends(
    tmp_path: Path, collections: list[int]
) -> None:
    """The read holds the collector off while it builds its rows and, when it lets
    it run again, counts them as old: without that the first object made after the
    read starts a collection of every object the read made (~50 ms for 100,000
    rows), which the next young collection repeats for what survives."""
    path = tmp_path / "journal.jsonl"
    _journal(path, 3000)
    read = read_journal(path)
    state = replay(read.rows)
    made_after = [[n] for n in range(500)]  # fewer than a young collection waits for
    assert collections == [] and gc.isenabled() and len(made_after) == 500
    assert _in_oldest_generation(read.rows) and _in_oldest_generation(state.calls["c1"])
    assert len(state.calls) == 3000 and state.spent["total"] == sum(range(3000))


def test_a_read_of_a_few_rows_leaves_them_young(tmp_path: Path, collections: list[int]) -> None:
    """A read that made few objects (a `next --wait` reading the rows appended since
    its last look) leaves them young, as the collector finds them: a collection
    over them is short and frees their garbage sooner."""
    path = tmp_path / "journal.jsonl"
    _journal(path, 20)
    read = read_journal(path)
    assert not _in_oldest_generation(read.rows)


def test_objects_the_process_froze_stay_frozen_after_a_read(
    tmp_path: Path, collections: list[int]
) -> None:
    """A process that froze objects of its own (`gc.freeze`) keeps them frozen: the
    read then lets the collector run as it finds it, and the next collection takes
    the young rows."""
    path = tmp_path / "journal.jsonl"
    _journal(path, 1500)
    frozen = [[n] for n in range(10)]
    gc.freeze()
    try:
        before = gc.get_freeze_count()
        read = read_journal(path)
        # Neither unfrozen (0) nor frozen anew (more): a frozen object that dies
        # meanwhile (another test's leftovers in this worker) may lower the count.
        assert 0 < gc.get_freeze_count() <= before
        assert not _in_oldest_generation(frozen) and not _in_oldest_generation(read.rows)
    finally:
        gc.unfreeze()
