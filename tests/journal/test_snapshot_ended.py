"""The replay snapshot of a run that ended: its journal grows no more, so the first
read after the end keeps all of it, and every later read decodes no row."""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any

import pytest

from crw.journal import snapshot
from crw.journal.log import JournalCorruptError, encode_batch, encode_body, read_journal
from crw.journal.replay import CallState, replay
from crw.journal.rows import Completed, Ended, Prepared, Started
from tests.journal.decoding import count_decoded_lines

STAMP = "2026-11-30T00:00:00.000000Z"


def _journal(path: Path, calls: int, *, ended: bool) -> None:
    rows: list[Any] = [Started(backend="session")]
    for n in range(calls):
        rows += [Prepared(call=f"n{n}.1", node=f"n{n}", role="executor")]
        rows += [Completed(call=f"n{n}.1", result={"n": n})]
    rows += [Ended(status="completed", state="done")] if ended else []
    with path.open("ab") as file:
        for seq, row in enumerate(rows, 1):
            file.write(encode_batch(seq, STAMP, [encode_body(row)]))


@pytest.fixture
def decoded(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the journal lines decoded, whichever way they are read."""
    return count_decoded_lines(monkeypatch)


def test_after_a_run_ended_a_read_decodes_no_row(tmp_path: Path, decoded: list[int]) -> None:
    """A journal below the size a snapshot is written at is read whole while the run
    goes on; once it has ended, the first read keeps it and the next decodes none."""
    journal = tmp_path / "journal.jsonl"
    _journal(journal, 20, ended=True)
    assert journal.stat().st_size < snapshot.REFRESH_MIN
    first, _ = snapshot.replay_journal(journal)
    assert first.state == "ended" and len(decoded) == 42
    decoded.clear()
    again, read = snapshot.replay_journal(journal)
    assert decoded == [] and read.rows == [] and again.state == "ended"
    assert len(again.calls) == 20 and read.end == journal.stat().st_size


def test_a_run_that_goes_on_is_read_whole_below_the_refresh_size(
    tmp_path: Path, decoded: list[int]
) -> None:
    journal = tmp_path / "journal.jsonl"
    _journal(journal, 20, ended=False)
    snapshot.replay_journal(journal)
    decoded.clear()
    snapshot.replay_journal(journal)
    assert len(decoded) == 41 and not (tmp_path / snapshot.SNAPSHOT).exists()


def calls_alive() -> int:
    """How many call states exist in the process."""
    return sum(type(obj) is CallState for obj in gc.get_objects())


def test_an_ended_run_read_from_its_snapshot_builds_no_call_until_one_is_read(
    tmp_path: Path,
) -> None:
    """spec: CMD-NEXT-1. `next` of a finished run answers from the run's state, its
    ended_state and its open subagents, none of which is a call: a read of an ended
    run from its snapshot builds its calls (10,000 of them in a run of 10,000 calls)
    only when one is read, as `status` reads them, and then as a replay leaves them."""
    journal = tmp_path / "journal.jsonl"
    _journal(journal, 20, ended=True)
    snapshot.replay_journal(journal)
    assert (tmp_path / snapshot.SNAPSHOT).exists()
    before = calls_alive()
    state, read = snapshot.replay_journal(journal)
    assert read.rows == [] and state.state == "ended" and state.ended_state == "done"
    assert calls_alive() == before
    assert len(state.calls) == 20 and calls_alive() == before + 20
    whole = replay(read_journal(journal).rows)
    for call in whole.calls.values():
        call.result = None
    assert state == whole


def test_a_fold_kept_on_writes_the_snapshot_and_keeps_only_the_open_calls_built(
    tmp_path: Path,
) -> None:
    """A reader that folds the journal on (`fold_on`: the owner's `next`, hundreds a
    run) writes the snapshot as a cold read would, and keeps the calls settled by
    then packed as the snapshot holds them: the calls it goes through at each read
    stay the open ones, not every call since its first read; all are still read."""
    journal = tmp_path / "journal.jsonl"
    _journal(journal, 10, ended=False)
    fold, _ = snapshot.read_fold(journal)
    seq = 22
    with journal.open("ab") as file:
        for n in range(10, 600):
            for row in (Prepared(call=f"n{n}.1", node=f"n{n}", role="executor"),) + (
                (Completed(call=f"n{n}.1", result={}),) if n < 599 else ()
            ):
                file.write(encode_batch(seq, STAMP, [encode_body(row)]))
                seq += 1
    with journal.open("rb") as file:
        file.seek(fold.end)
        snapshot.fold_on(journal, fold, file.read())
    assert (tmp_path / snapshot.SNAPSHOT).exists() and fold.saved == fold.end
    deferred = fold.state.deferred_calls()
    assert deferred is not None and list(deferred.open) == ["n599.1"]
    cold, _ = snapshot.replay_journal(journal)
    assert list(fold.state.calls) == list(cold.calls) == [f"n{n}.1" for n in range(600)]


def test_a_snapshot_of_an_ended_run_never_hides_damage_to_its_last_line(tmp_path: Path) -> None:
    """The snapshot kept the ended run, its last line among the bytes it covers;
    one digit of that line's `at` changed: the snapshot's CRC no longer matches, the
    journal is read whole, and the read is refused as corrupt at the ended line,
    never a run that is not ended."""
    journal = tmp_path / "journal.jsonl"
    _journal(journal, 20, ended=True)
    snapshot.replay_journal(journal)
    assert (tmp_path / snapshot.SNAPSHOT).exists()
    data = journal.read_bytes()
    last = data.rindex(b"\n", 0, len(data) - 1) + 1
    at = data.index(b"2026", last) + 3
    journal.write_bytes(data[:at] + b"7" + data[at + 1 :])
    with pytest.raises(JournalCorruptError) as caught:
        snapshot.replay_journal(journal)
    assert (caught.value.offset, caught.value.valid_at) == (last, None)
    assert caught.value.intact.rows[-1]["row"] == "completed"
