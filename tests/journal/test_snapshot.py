"""The replay snapshot beside a journal: the same state as a replay of the whole
journal, only the rows after it decoded, and thrown away when it does not match."""

from __future__ import annotations

import errno
import os
import tracemalloc
import zlib
from pathlib import Path
from typing import Any

import pytest

from crw.journal import snapshot
from crw.journal.log import JournalCorruptError, encode_batch, encode_body, read_journal
from crw.journal.replay import RunState, replay
from crw.journal.rows import Completed, Ended, Prepared, Reused, Started, ThreadStarted, Tokens
from tests.journal.decoding import count_decoded_lines

STAMP = "2026-11-29T19:35:51.123456Z"


def _append(journal: Path, seq: int, calls: range) -> int:
    with journal.open("ab") as file:
        if seq == 1:
            file.write(encode_batch(1, STAMP, [encode_body(Started(backend="session"))]))
            seq = 2
        for n in calls:
            call = f"n{n}.1"
            rows = [
                Prepared(call=call, node=f"n{n}", role="executor"),
                ThreadStarted(call=call, thread_id=f"th-{n}", attempt=1, model="m"),
                Completed(call=call, result={"n": n}, tokens=Tokens(input=n, total=n)),
            ]
            file.write(encode_batch(seq, STAMP, [encode_body(row) for row in rows]))
            seq += len(rows)
    return seq


def without_results(journal: Path) -> RunState:
    """The whole journal's replay, as a snapshot keeps it: no call's result."""
    state = replay(read_journal(journal).rows)
    for call in state.calls.values():
        call.result = None
    return state


@pytest.fixture
def decoded(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the journal lines decoded; every read writes a snapshot."""
    lines = count_decoded_lines(monkeypatch)
    monkeypatch.setattr(snapshot, "REFRESH_BYTES", 1)
    return lines


def test_a_snapshot_reads_as_the_whole_journal_and_decodes_only_what_follows(
    tmp_path: Path, decoded: list[int]
) -> None:
    journal = tmp_path / "journal.jsonl"
    seq = _append(journal, 1, range(50))
    first, read = snapshot.replay_journal(journal)
    assert len(decoded) == 151 and read.end == journal.stat().st_size
    assert (tmp_path / snapshot.SNAPSHOT).exists()
    assert first == replay(read_journal(journal).rows)
    kept = without_results(journal)
    decoded.clear()
    again, read = snapshot.replay_journal(journal)
    assert decoded == [] and read.rows == [] and again == kept
    with journal.open("ab") as file:
        file.write(encode_batch(seq, STAMP, [encode_body(Ended(status="completed", state="x"))]))
    decoded.clear()
    later, read = snapshot.replay_journal(journal)
    assert len(decoded) == 1 and read.last_seq == seq
    assert later == without_results(journal)
    assert later.state == "ended" and later.ended_state == "x"


def test_a_journal_damaged_under_the_snapshot_is_read_whole_and_reported(
    tmp_path: Path, decoded: list[int]
) -> None:
    journal = tmp_path / "journal.jsonl"
    _append(journal, 1, range(20))
    snapshot.replay_journal(journal)
    data = bytearray(journal.read_bytes())
    data[200] ^= 1  # a flipped bit in an early row, after the snapshot was taken
    journal.write_bytes(bytes(data))
    with pytest.raises(JournalCorruptError) as whole:
        read_journal(journal)
    with pytest.raises(JournalCorruptError) as read:
        snapshot.replay_journal(journal)
    assert (read.value.offset, read.value.valid_at) == (whole.value.offset, whole.value.valid_at)


def test_a_snapshot_of_another_format_or_journal_is_not_taken(
    tmp_path: Path, decoded: list[int]
) -> None:
    journal = tmp_path / "journal.jsonl"
    _append(journal, 1, range(5))
    snapshot.replay_journal(journal)
    (tmp_path / snapshot.SNAPSHOT).write_bytes(b"not a snapshot")
    decoded.clear()
    state, _ = snapshot.replay_journal(journal)
    assert len(decoded) == 16 and state == replay(read_journal(journal).rows)
    other = tmp_path / "other" / "journal.jsonl"
    other.parent.mkdir()
    _append(other, 1, range(3))
    (other.parent / snapshot.SNAPSHOT).write_bytes((tmp_path / snapshot.SNAPSHOT).read_bytes())
    state, _ = snapshot.replay_journal(other)
    assert len(state.calls) == 3


def test_a_damaged_byte_anywhere_in_the_snapshot_is_never_taken(
    tmp_path: Path, decoded: list[int]
) -> None:
    """A changed byte in the snapshot's body could still unmarshal (a call's state
    `completed` becoming `complxted`): its own checksum throws it away instead."""
    journal = tmp_path / "journal.jsonl"
    _append(journal, 1, range(3))
    snapshot.replay_journal(journal)
    path = tmp_path / snapshot.SNAPSHOT
    good = path.read_bytes()
    at = good.index(b"completed")
    for offset in (0, 5, 9, at, len(good) - 1):
        damaged = bytearray(good)
        damaged[offset] ^= 0x10
        path.write_bytes(bytes(damaged))
        decoded.clear()
        state, _ = snapshot.replay_journal(journal)
        assert len(decoded) == 10, offset  # the journal was read whole
        assert state == replay(read_journal(journal).rows)


def test_a_reader_decodes_at_most_a_share_of_a_journal_under_a_mebibyte(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: CMD-NEXT-1. A run of a thousand calls has a journal of a few MB, read
    by every `next`: a reader writes the snapshot once the rows beyond it are a
    sixteenth of the journal, so a journal under 1 MiB is not decoded whole at
    every read, and a read after a few calls decodes only their rows."""
    journal = tmp_path / "journal.jsonl"
    seq = _append(journal, 1, range(1500))
    size = journal.stat().st_size
    assert snapshot.REFRESH_MIN * 4 < size < 1 << 20
    snapshot.replay_journal(journal)
    assert (tmp_path / snapshot.SNAPSHOT).exists()
    lines = count_decoded_lines(monkeypatch)
    seq = _append(journal, seq, range(1500, 1510))
    state, _ = snapshot.replay_journal(journal)
    assert len(lines) == 3 * 10  # the ten calls appended, three rows each
    for call in state.calls.values():
        call.result = None
    assert state == without_results(journal)


def test_a_read_that_writes_a_snapshot_checks_the_journal_under_the_old_one_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: CMD-NEXT-1. The journal under a snapshot is most of a big run's: a read
    that writes a new snapshot checks those bytes once (their CRC against the old
    snapshot's), and the new snapshot's CRC goes on from the old one's over the
    bytes after it; the state read back is the whole journal's."""
    journal = tmp_path / "journal.jsonl"
    seq = _append(journal, 1, range(400))
    snapshot.replay_journal(journal)
    _append(journal, seq, range(400, 420))
    monkeypatch.setattr(snapshot, "REFRESH_BYTES", 1)  # this read writes a snapshot
    old = len((tmp_path / snapshot.SNAPSHOT).read_bytes())
    crc32 = zlib.crc32
    checked: list[int] = []

    def counted(data: Any, value: int = 0) -> int:
        if len(data) > 4096:  # not a journal line's own checksum
            checked.append(len(data))
        return crc32(data, value)

    monkeypatch.setattr(zlib, "crc32", counted)
    state, read = snapshot.replay_journal(journal)
    monkeypatch.undo()
    new = len((tmp_path / snapshot.SNAPSHOT).read_bytes())
    assert len(read.rows) == 3 * 20
    # the old snapshot's seal, the journal once, the new snapshot's seal
    assert sum(checked) <= old + journal.stat().st_size + new
    for call in state.calls.values():
        call.result = None  # the rows after the snapshot carry theirs
    assert state == without_results(journal)
    again, read_again = snapshot.replay_journal(journal)
    assert read_again.rows == [] and again == state


def test_an_owner_reading_a_big_run_decodes_at_most_256_kib_a_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: CMD-NEXT-1. The owner asks `next` after every few calls of a run that
    goes on: however big the journal (here one whose sixteenth is past the cap),
    no read decodes more than 256 KiB beyond the snapshot it found (at 10,000
    calls, 1 MiB let ~580 rows be decoded a read), and the state is the whole
    journal's."""
    monkeypatch.setattr(snapshot, "REFRESH_SHARE", 1)  # the cap, not the share, binds
    journal = tmp_path / "journal.jsonl"
    seq = _append(journal, 1, range(600))
    beyond = []
    for n in range(600, 1260, 3):
        seq = _append(journal, seq, range(n, n + 3))
        found = snapshot.peek_snapshot(tmp_path / snapshot.SNAPSHOT)
        state, read = snapshot.replay_journal(journal, live=True)
        beyond.append(read.end - (found.end if found is not None else 0))
    assert max(beyond[1:]) < (256 << 10) + 2048  # three calls more; the first found none
    for call in state.calls.values():
        call.result = None
    assert state == without_results(journal)


@pytest.mark.parametrize("fault", ["name taken by a directory", "disk full"])
def test_a_snapshot_that_cannot_be_written_fails_no_read_and_leaves_no_file(
    tmp_path: Path, decoded: list[int], monkeypatch: pytest.MonkeyPatch, fault: str
) -> None:
    """The snapshot is the reader's own cache, never a reason to fail: where it cannot
    be written (its name is a directory's, the disk is full) every read decodes the
    journal whole and answers as ever, and no temporary file is left behind."""
    journal = tmp_path / "journal.jsonl"
    _append(journal, 1, range(20))
    if fault == "disk full":

        def full(*args: Any) -> None:
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(os, "replace", full)
    else:
        (tmp_path / snapshot.SNAPSHOT).mkdir()
    for _ in range(2):
        decoded.clear()
        state, read = snapshot.replay_journal(journal)
        assert len(decoded) == 61 and read.end == journal.stat().st_size
        assert state == replay(read_journal(journal).rows)
    left = {path.name for path in tmp_path.iterdir()}
    assert left == {"journal.jsonl"} | ({snapshot.SNAPSHOT} if fault != "disk full" else set())


def test_a_snapshot_is_read_without_a_copy_of_its_body(tmp_path: Path) -> None:
    """The owner's cold commands read the snapshot of a big run (megabytes) at each
    start: its bytes are read once and its body is checked and unmarshalled in
    place. Held under three times the file: the bytes read, and what marshal hands
    back (the settled calls' packed bytes, the calls' ids); a copy of the body for
    the seal or for marshal took it to 3.5 times."""
    journal = tmp_path / "journal.jsonl"
    _append(journal, 1, range(2_000))
    snapshot.replay_journal(journal)
    path = tmp_path / snapshot.SNAPSHOT
    size = path.stat().st_size
    tracemalloc.start()
    try:
        taken = snapshot.peek_snapshot(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert taken is not None and taken.end == journal.stat().st_size
    assert size > 200_000 and peak < 3 * size, (peak, size)


def test_a_reruns_reused_calls_read_the_same_through_the_snapshot(
    tmp_path: Path, decoded: list[int]
) -> None:
    """A reused row opens its call as a prepared row does and names its source;
    its completed row ends it with no token of the run (`saved_tokens` is no
    figure): the snapshot keeps all of it."""
    journal = tmp_path / "journal.jsonl"
    rows = [
        Reused(call="n0.1", node="n0", role="explorer", source_run="r0", source_call="n0.2",
               result_digest="sha256:d", saved_tokens=Tokens(total=90)),
        Completed(call="n0.1", result={"n": 0}, result_digest="sha256:d"),
    ]  # fmt: skip
    with journal.open("ab") as file:
        file.write(encode_batch(1, STAMP, [encode_body(Started(backend="app-server"))]))
        file.write(encode_batch(2, STAMP, [encode_body(row) for row in rows]))
    _append(journal, 4, range(1, 3))
    first, _ = snapshot.replay_journal(journal)
    call = first.calls["n0.1"]
    assert (call.node, call.role, call.state, call.reused) == (
        "n0", "explorer", "completed", "r0/n0.2",
    )  # fmt: skip
    assert (call.tokens["total"], first.spent["total"]) == (0, 1 + 2)
    again, _ = snapshot.replay_journal(journal)
    assert again == without_results(journal) and again.calls["n0.1"].reused == "r0/n0.2"
