"""The JournalWriter actor: durability, total order, group commit, failures."""

from __future__ import annotations

import errno
import logging
import os
import random
import stat
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
import trio
from trio.testing import assert_no_checkpoints

from crw.actors.journal_writer import (
    JournalClosedError,
    JournalWriteError,
    JournalWriter,
    open_journal_writer,
)
from crw.clock import fixed_clock
from crw.journal.log import (
    FRAMING,
    JournalCorruptError,
    encode_batch,
    encode_body,
    read_journal,
)
from crw.journal.rows import RowModel, Started, dump_row

STAMP = "2026-11-29T19:35:51.123456Z"


def _rows(committer: int, commit: int, size: int) -> list[RowModel]:
    return [
        Started.model_validate(
            {"call": f"c{committer}", "committer": committer, "commit": commit, "i": i, "n": size}
        )
        for i in range(size)
    ]


def _seq(row: RowModel) -> int:
    assert row.seq is not None
    return row.seq


def _key(row: dict[str, Any]) -> tuple[int, int]:
    return row["committer"], row["commit"]


def _assert_whole_batches(rows: list[dict[str, Any]]) -> None:
    """Seqs 1..N contiguous; each commit's rows contiguous, whole and in order."""
    assert [row["seq"] for row in rows] == list(range(1, len(rows) + 1))
    pos = 0
    while pos < len(rows):
        size = rows[pos]["n"]
        batch = rows[pos : pos + size]
        assert [_key(row) for row in batch] == [_key(rows[pos])] * size
        assert [row["i"] for row in batch] == list(range(size))
        pos += size


@pytest.fixture
def sync_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The fds os.fsync and os.fdatasync were called on, in order."""
    calls: list[int] = []
    for name in ("fsync", "fdatasync"):
        real = getattr(os, name)

        def counted(fd: int, real: Callable[[int], None] = real) -> None:
            calls.append(fd)
            real(fd)

        monkeypatch.setattr(os, name, counted)
    return calls


async def test_commit_returns_copies_with_seq_and_at_once_durable(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    rows = _rows(0, 0, 3)
    async with open_journal_writer(path, clock=fixed_clock(STAMP)) as journal:
        first = await journal.commit(rows[:1])
        rest = await journal.commit(rows[1:])
        assert [(row.seq, row.at) for row in first + rest] == [(1, STAMP), (2, STAMP), (3, STAMP)]
        assert [row.model_extra for row in first + rest] == [row.model_extra for row in rows]
        assert all(row.seq is None and row.at is None for row in rows)
        assert [row["seq"] for row in read_journal(path).rows] == [1, 2, 3]


async def test_an_unstamped_commit_copies_no_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A committer that keeps the rows it built (a session or App Server call) asks
    for no stamped copies: none is made, and the rows are durable all the same."""
    from pydantic import BaseModel

    copies = 0
    model_copy = BaseModel.model_copy

    def counted(self: BaseModel, *args: Any, **kwargs: Any) -> Any:
        nonlocal copies
        copies += 1
        return model_copy(self, *args, **kwargs)

    monkeypatch.setattr(BaseModel, "model_copy", counted)
    path = tmp_path / "journal.jsonl"
    async with open_journal_writer(path, clock=fixed_clock(STAMP)) as journal:
        assert await journal.commit(_rows(0, 0, 3), stamped=False) == []
        assert copies == 0
        assert len(await journal.commit(_rows(1, 0, 2))) == 2
        assert copies == 2
    assert [row["seq"] for row in read_journal(path).rows] == [1, 2, 3, 4, 5]


async def test_empty_commit_returns_empty_without_writing(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    async with open_journal_writer(path) as journal:
        assert await journal.commit([]) == []
    assert path.read_bytes() == b""


async def test_row_that_cannot_be_encoded_fails_only_its_own_commit(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    async with open_journal_writer(path) as journal:
        with pytest.raises(ValueError):
            await journal.commit([*_rows(0, 0, 1), Started.model_validate({FRAMING: 1})])
        (row,) = await journal.commit(_rows(1, 0, 1))
    assert row.seq == 1
    assert [r["committer"] for r in read_journal(path).rows] == [1]


async def test_commit_after_close_is_refused(tmp_path: Path) -> None:
    async with open_journal_writer(tmp_path / "journal.jsonl") as journal:
        pass
    with pytest.raises(JournalClosedError, match="closed"):
        await journal.commit(_rows(0, 0, 1))


async def test_creating_the_journal_syncs_its_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced_dirs = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        synced_dirs.append(stat.S_ISDIR(os.fstat(fd).st_mode))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    async with open_journal_writer(tmp_path / "journal.jsonl"):
        pass
    async with open_journal_writer(tmp_path / "journal.jsonl"):
        pass
    assert synced_dirs == [True]


async def _commit_batches(
    journal: JournalWriter, committer: int, sizes: list[int], acked: list[list[RowModel]]
) -> None:
    for commit, size in enumerate(sizes):
        acked.append(await journal.commit(_rows(committer, commit, size)))


async def test_concurrent_commits_get_a_total_order_of_whole_batches(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    rng = random.Random(7)
    acked: list[list[RowModel]] = []
    async with open_journal_writer(path) as journal, trio.open_nursery() as nursery:
        for committer in range(32):
            sizes = [rng.randint(1, 4) for _ in range(5)]
            nursery.start_soon(_commit_batches, journal, committer, sizes, acked)
    rows = read_journal(path).rows
    _assert_whole_batches(rows)
    assert len(acked) == 32 * 5
    for returned in acked:
        seqs = [_seq(row) for row in returned]
        assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))
        assert [rows[seq - 1] for seq in seqs] == [dump_row(row) for row in returned]


async def test_commits_pending_together_share_one_fsync(
    tmp_path: Path, sync_calls: list[int]
) -> None:
    path = tmp_path / "journal.jsonl"
    acked: list[list[RowModel]] = []
    async with open_journal_writer(path) as journal:
        sync_calls.clear()
        async with trio.open_nursery() as nursery:
            for committer in range(32):
                nursery.start_soon(_commit_batches, journal, committer, [1, 2, 1, 3], acked)
    commits = len(acked)
    assert commits == 128
    assert len(sync_calls) <= commits // 8
    _assert_whole_batches(read_journal(path).rows)


@pytest.mark.parametrize("seed", range(12))
async def test_cancelled_writer_keeps_every_acknowledged_commit_whole(
    tmp_path: Path, seed: int
) -> None:
    path = tmp_path / "journal.jsonl"
    rng = random.Random(seed)
    crash_after = rng.randrange(1, 32 * 20)
    acked: list[list[RowModel]] = []

    async def committer(journal: JournalWriter, committer: int) -> None:
        for commit in range(20):
            for _ in range(rng.randrange(4)):
                await trio.lowlevel.checkpoint()
            acked.append(await journal.commit(_rows(committer, commit, rng.randint(1, 4))))
            if len(acked) == crash_after:
                scope.cancel()

    with trio.CancelScope() as scope:
        async with open_journal_writer(path) as journal, trio.open_nursery() as nursery:
            for k in range(32):
                nursery.start_soon(committer, journal, k)
    assert scope.cancelled_caught
    read = read_journal(path)
    assert read.torn is None
    _assert_whole_batches(read.rows)
    for returned in acked:
        assert [read.rows[_seq(row) - 1] for row in returned] == [dump_row(r) for r in returned]
    async with open_journal_writer(path) as journal:
        (again,) = await journal.commit(_rows(99, 0, 1))
    assert again.seq == read.last_seq + 1


async def test_reopen_continues_seq_after_dropping_a_torn_tail(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "journal.jsonl"
    async with open_journal_writer(path) as journal:
        await journal.commit(_rows(0, 0, 2))
        await journal.commit(_rows(0, 1, 3))
    whole = path.read_bytes()
    with path.open("ab") as file:
        file.write(encode_batch(6, "x", [encode_body(Started())] * 2)[:-9])
    async with open_journal_writer(path) as journal:
        torn = [r for r in caplog.records if r.name == "crw.journal"]
        assert len(torn) == 1 and f"byte {len(whole)}" in torn[0].getMessage()
        assert path.read_bytes() == whole
        (row,) = await journal.commit(_rows(0, 2, 1))
    assert row.seq == 6
    caplog.clear()
    read = read_journal(path)
    assert read.torn is None and [r["seq"] for r in read.rows] == [1, 2, 3, 4, 5, 6]
    assert not caplog.records


async def test_a_journal_damaged_in_the_middle_is_refused_and_kept_as_it_is(
    tmp_path: Path,
) -> None:
    path = tmp_path / "journal.jsonl"
    async with open_journal_writer(path) as journal:
        for commit in range(3):
            await journal.commit(_rows(0, commit, 2))
    lines = path.read_bytes().splitlines(keepends=True)
    lines[1] = lines[1].replace(b'"committer"', b'"commiter!"')
    damaged = b"".join(lines)
    path.write_bytes(damaged)
    with pytest.raises(JournalCorruptError, match="kept as it is"):
        async with open_journal_writer(path) as journal:
            await journal.commit(_rows(1, 0, 1))
    assert path.read_bytes() == damaged


def _fail_journal_writes(monkeypatch: pytest.MonkeyPatch, failures: int, *, partial: bool) -> None:
    """Make the next `failures` journal writes fail with ENOSPC, each after
    writing half its bytes first when `partial`."""
    real_write = os.write
    state = {"failures": failures, "half_written": False}

    def write(fd: int, data: Any) -> int:
        if state["failures"] and bytes(data[:7]) == b'{"seq":':
            if partial and not state["half_written"]:
                state["half_written"] = True
                return real_write(fd, data[: len(data) // 2])
            state["failures"] -= 1
            state["half_written"] = False
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", write)


@pytest.mark.parametrize("partial", [False, True])
async def test_failed_write_fails_its_group_and_the_next_commit_succeeds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, partial: bool
) -> None:
    path = tmp_path / "journal.jsonl"
    failed: list[JournalWriteError] = []

    async def commit_expecting_failure(journal: JournalWriter, committer: int) -> None:
        with pytest.raises(JournalWriteError) as caught:
            await journal.commit(_rows(committer, 0, 2))
        failed.append(caught.value)

    async with open_journal_writer(path) as journal:
        await journal.commit(_rows(0, 0, 1))
        _fail_journal_writes(monkeypatch, 1, partial=partial)
        async with trio.open_nursery() as nursery:
            for committer in (1, 2, 3):
                nursery.start_soon(commit_expecting_failure, journal, committer)
        (after,) = await journal.commit(_rows(4, 0, 1))
    assert len(failed) == 3
    assert all(isinstance(err.__cause__, OSError) for err in failed)
    assert all(err.__cause__.errno == errno.ENOSPC for err in failed)  # type: ignore[union-attr]
    assert "\n" not in str(failed[0]) and str(path) in str(failed[0])
    assert after.seq == 2
    read = read_journal(path)
    assert read.torn is None
    assert [(row["seq"], row["committer"]) for row in read.rows] == [(1, 0), (2, 4)]


async def test_failed_fsync_fails_its_group_and_leaves_no_rows_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "journal.jsonl"
    real = os.fdatasync
    failures = [OSError(errno.EIO, os.strerror(errno.EIO))]

    def fdatasync(fd: int) -> None:
        if failures:
            raise failures.pop()
        real(fd)

    async with open_journal_writer(path) as journal:
        monkeypatch.setattr(os, "fdatasync", fdatasync)
        with pytest.raises(JournalWriteError, match="Input/output error"):
            await journal.commit(_rows(0, 0, 2))
        (row,) = await journal.commit(_rows(1, 0, 1))
    assert row.seq == 1
    assert [r["committer"] for r in read_journal(path).rows] == [1]


async def test_a_commit_behind_returns_at_once_and_is_durable_before_any_later_commit(
    tmp_path: Path,
) -> None:
    """spec: HARV-35 (rows committed behind are durable before a later commit
    returns): an App Server call does not wait for turn_started nor for its end, and
    the rows after them, an interrupt's row among them, come only after them."""
    path = tmp_path / "journal.jsonl"
    seen: list[list[Any]] = []

    def hook(rows: Sequence[RowModel]) -> None:
        seen.append([(row.model_extra or {})["committer"] for row in rows])

    async with open_journal_writer(path, after_commit=hook) as journal:
        with assert_no_checkpoints():  # no wait of any kind: not durable yet
            await journal.commit_behind(_rows(0, 0, 2))
            await journal.commit_behind(_rows(1, 0, 1))
        assert read_journal(path).rows == []
        (row,) = await journal.commit(_rows(2, 0, 1))
        assert [r["committer"] for r in read_journal(path).rows] == [0, 0, 1, 2]
        assert row.seq == 4
    assert seen == [[0, 0], [1], [2]]  # behind ones by the writer, once durable


async def test_a_lost_commit_behind_fails_every_later_commit_and_the_close(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows nobody waited for that could not be written: no row is written after
    them (the call that queued them would go on as if they were), every later
    commit fails as the lost group did, and so does the writer's close when no
    commit was made after them (the run stops: journal_unwritable)."""
    path = tmp_path / "journal.jsonl"
    async with open_journal_writer(path) as journal:
        await journal.commit(_rows(0, 0, 1))
        _fail_journal_writes(monkeypatch, 1, partial=False)
        await journal.commit_behind(_rows(1, 0, 1))
        for committer in (2, 3):
            with pytest.raises(JournalWriteError) as caught:
                await journal.commit(_rows(committer, 0, 1))
            assert caught.value.__cause__.errno == errno.ENOSPC  # type: ignore[union-attr]
    assert [r["committer"] for r in read_journal(path).rows] == [0]
    _fail_journal_writes(monkeypatch, 1, partial=False)
    with pytest.raises(JournalWriteError, match="No space left"):
        async with open_journal_writer(path) as journal:
            await journal.commit_behind(_rows(4, 0, 1))
    assert [r["committer"] for r in read_journal(path).rows] == [0]


async def test_writer_that_cannot_cut_back_refuses_every_later_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "journal.jsonl"

    def ftruncate(fd: int, length: int) -> None:
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    async with open_journal_writer(path) as journal:
        await journal.commit(_rows(0, 0, 1))
        _fail_journal_writes(monkeypatch, 1, partial=True)
        monkeypatch.setattr(os, "ftruncate", ftruncate)
        with pytest.raises(JournalWriteError):
            await journal.commit(_rows(1, 0, 2))
        with pytest.raises(JournalWriteError):
            await journal.commit(_rows(2, 0, 1))
    monkeypatch.undo()
    with caplog.at_level(logging.WARNING, logger="crw.journal"):
        async with open_journal_writer(path) as journal:
            (row,) = await journal.commit(_rows(3, 0, 1))
    assert len(caplog.records) == 1
    assert row.seq == 2
    assert [r["committer"] for r in read_journal(path).rows] == [0, 3]


async def test_journal_that_cannot_be_opened_is_a_one_line_crw_error(tmp_path: Path) -> None:
    with pytest.raises(JournalWriteError, match="could not open the journal") as caught:
        async with open_journal_writer(tmp_path / "missing-dir" / "journal.jsonl"):
            pass
    assert "\n" not in str(caught.value)


async def test_framing_member_never_leaks_into_returned_rows(tmp_path: Path) -> None:
    async with open_journal_writer(tmp_path / "journal.jsonl") as journal:
        (row,) = await journal.commit(_rows(0, 0, 1))
    assert FRAMING not in (row.model_extra or {})
    (read,) = read_journal(tmp_path / "journal.jsonl").row_models()
    assert FRAMING not in (read.model_extra or {})


@pytest.mark.parametrize("in_thread", [True, False])
async def test_commits_made_while_a_group_syncs_in_a_worker_thread_form_the_next_group(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, in_thread: bool
) -> None:
    """spec: GEN-5 (each commit durable before it returns): with `sync_in_thread`
    (a session run's writer) the loop runs the other tasks while a group's write
    and fsync run, so the five commits they make meanwhile share the next fsync;
    inline, none of them is made until the first fsync is over."""
    import threading

    from crw.journal.log import JournalFile

    append = JournalFile.append
    queued = threading.Event()
    seen: list[tuple[int, bool]] = []

    def slow(self: JournalFile, data: bytes, rows: int) -> None:
        if not seen:  # the first group: the disk is slow while the others commit
            queued.wait(timeout=0.5)
        seen.append((rows, queued.is_set()))
        append(self, data, rows)

    monkeypatch.setattr(JournalFile, "append", slow)
    made = 0

    async def later(journal: JournalWriter, i: int) -> None:
        nonlocal made
        made += 1
        if made == 5:
            queued.set()
        await journal.commit(_rows(i, 0, 1))

    path = tmp_path / "journal.jsonl"
    async with (
        open_journal_writer(path, sync_in_thread=in_thread) as journal,
        trio.open_nursery() as nursery,
    ):
        nursery.start_soon(journal.commit, _rows(0, 0, 1))
        await trio.sleep(0.01)  # the first group is in its write
        for i in range(1, 6):
            nursery.start_soon(later, journal, i)
    assert seen == ([(1, True), (5, True)] if in_thread else [(1, False), (5, True)])
    assert len(read_journal(path).rows) == 6
