"""The run process's snapshot: the journal replayed a piece of whole batches at a
time, the same state as a replay of all of it, never all its rows at once."""

from __future__ import annotations

import tracemalloc
import weakref
import zlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

import crw.journal.framing as framing
import crw.journal.log as log
from crw.actors import run as run_module
from crw.engine.run.rundir import RunDir
from crw.journal import snapshot, snapshot_pack, streamed
from crw.journal.log import encode_batch, encode_body, read_journal
from crw.journal.replay import CallState, replay
from crw.journal.rows import Completed, Decision, Held, Prepared, StepPublished
from tests.journal.decoding import count_decoded_lines
from tests.journal.test_snapshot import STAMP, _append, without_results


def _batch_sizes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The rows of each piece decoded at once from now on."""
    sizes: list[int] = []
    whole_batches = framing.whole_batches

    def spying(pieces: Iterable[bytes | memoryview], after: int) -> Any:
        read = whole_batches(pieces, after)
        sizes.append(len(read[0]) if read is not None else -1)
        return read

    monkeypatch.setattr(log, "whole_batches", spying)
    return sizes


def test_a_leaving_process_keeps_the_snapshot_without_decoding_the_journal_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The snapshot a run process leaves is the whole journal's replay, and it
    decodes at most a piece's rows at a time: a 10,000-call run's rows as dicts at
    once were its peak memory."""
    run = RunDir(tmp_path / "r1")
    run.create()
    _append(run.journal, 1, range(400))
    monkeypatch.setattr(streamed, "PIECE", 4096)
    sizes = _batch_sizes(monkeypatch)
    run_module._keep_snapshot(run)
    assert sum(sizes) == 1 + 3 * 400 and min(sizes) > 0
    assert max(sizes) <= 4096 // 100  # a row of this journal is over 100 bytes
    decoded = count_decoded_lines(monkeypatch)
    state, read = snapshot.replay_journal(run.journal)
    assert decoded == [] and read.end == run.journal.stat().st_size
    assert state == without_results(run.journal)


@pytest.mark.parametrize("piece", [64, 700, 5000, 1 << 20])
def test_pieces_replay_to_the_whole_journal_state_its_end_and_crc(
    tmp_path: Path, piece: int
) -> None:
    """Whatever the piece: a batch larger than it is read whole, a piece that ends
    inside a batch or a line leaves the rest to the next."""
    journal = tmp_path / "journal.jsonl"
    seq = _append(journal, 1, range(30))
    big = [StepPublished(call="n99.1", k=1, input="x" * 3000), Prepared(call="n99.1")]
    with journal.open("ab") as file:
        file.write(encode_batch(seq, STAMP, [encode_body(row) for row in big]))
    _append(journal, seq + 2, range(30, 40))
    data = journal.read_bytes()
    replayed = streamed.replay_pieces(journal, piece)
    assert replayed.state == replay(read_journal(journal).rows)
    assert (replayed.end, replayed.crc) == (len(data), zlib.crc32(data))


def test_pieces_stop_at_a_torn_tail(tmp_path: Path) -> None:
    journal = tmp_path / "journal.jsonl"
    seq = _append(journal, 1, range(5))
    whole = journal.read_bytes()
    rows = [Prepared(call="n9.1"), Completed(call="n9.1", result={"n": 9})]
    with journal.open("ab") as file:
        file.write(encode_batch(seq, STAMP, [encode_body(row) for row in rows])[:-40])
    replayed = streamed.replay_pieces(journal, 256)
    assert (replayed.end, replayed.crc) == (len(whole), zlib.crc32(whole))
    assert replayed.state == replay(read_journal(journal).rows)
    assert "n9.1" not in replayed.state.calls


def test_the_snapshot_a_leaving_process_writes_reads_back_as_the_whole_replay(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run process's exit snapshot (the journal replayed a piece at a time, the
    settled calls packed as they settle) reads back as the whole journal's replay,
    in the journal's order, in fewer packs than SETTLED_CHUNKS: a reader's next
    snapshot keeps them as they are, unmarshalling none."""
    run = RunDir(tmp_path / "pieced")
    run.create()
    _append(run.journal, 1, range(300))
    monkeypatch.setattr(streamed, "PIECE", 4096)
    run_module._keep_snapshot(run)
    written = (run.root / snapshot.SNAPSHOT).read_bytes()
    assert written[:9] == b"%08x\n" % zlib.crc32(written[9:])
    state = snapshot.replay_journal(run.journal)[0]
    deferred = state.deferred_calls()
    assert deferred is not None and isinstance(deferred.source, snapshot_pack.Packed)
    packs = deferred.source.settled
    assert 1 < len(packs) < snapshot_pack.SETTLED_CHUNKS
    assert snapshot_pack.pack_calls(state)[1] == packs
    expected = without_results(run.journal)
    assert list(state.calls) == list(expected.calls) and state == expected


def test_the_exit_replay_holds_no_settled_call_as_a_call_state(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The calls each piece settles leave the state as the snapshot's values: the
    exit of a 100,000-call run held every call as a CallState (some 4 KB each, the
    run process's peak), now at most a piece's."""
    journal = tmp_path / "journal.jsonl"
    _append(journal, 1, range(120))
    seen: dict[int, weakref.ref[CallState]] = {}
    alive: list[int] = []
    folded = replay

    def counting(rows: Any, into: Any = None) -> Any:
        state = folded(rows, into=into)
        deferred = state.deferred_calls()
        seen.update(
            {id(c): weakref.ref(c) for c in (deferred.open if deferred else state.calls).values()}
        )
        alive.append(sum(ref() is not None for ref in seen.values()))
        return state

    monkeypatch.setattr(streamed, "replay", counting)
    replayed = streamed.replay_packed(journal, journal.stat().st_size, 4096)
    assert len(alive) > 10 and max(alive) <= 4096 // 300 + 2  # a call's rows are over 300 bytes
    assert replayed.state == without_results(journal)


def test_a_row_that_moves_a_packed_call_on_replays_as_the_whole_journal(tmp_path: Path) -> None:
    """A settled call moved on by a later row (held, then retried) has every call
    built again, and packed again from there: the state is the whole replay's."""
    journal = tmp_path / "journal.jsonl"
    seq = _append(journal, 1, range(120))
    rows = [Held(call="n7.1", reason="schema_invalid"), Decision(call="n7.1", choice="retry")]
    with journal.open("ab") as file:
        for row in rows:
            file.write(encode_batch(seq, STAMP, [encode_body(row)]))
            seq += 1
    _append(journal, seq, range(120, 200))
    replayed = streamed.replay_packed(journal, journal.stat().st_size, 2048)
    expected = without_results(journal)
    assert replayed.state.calls["n7.1"].state == "prepared"
    assert list(replayed.state.calls) == list(expected.calls) and replayed.state == expected


def test_the_exit_replay_keeps_no_result(tmp_path: Path) -> None:
    """The snapshot keeps no call's result, so the exit's replay drops each as it
    folds its piece: a big run's results are most of its journal, and were held
    whole while the snapshot was written."""
    journal = tmp_path / "journal.jsonl"
    _append(journal, 1, range(50))
    replayed = streamed.replay_pieces(journal, 512, results=False)
    assert [call.result for call in replayed.state.calls.values()] == [None] * 50
    assert replayed.state == without_results(journal)
    assert streamed.replay_pieces(journal, 512).state.calls["n7.1"].result == {"n": 7}


def test_the_exit_snapshot_is_written_without_a_copy_of_its_packs(tmp_path: Path) -> None:
    """The exit's snapshot of a big run is mostly its settled calls' packs (some
    38 MB at 100,000 calls); marshalled into one payload with the rest they were
    held twice at the run's end. Written piece by piece, what the write allocates
    is a small part of them, and the file reads back as the whole replay."""
    journal = tmp_path / "journal.jsonl"
    _append(journal, 1, range(3_000))
    size = journal.stat().st_size
    replayed = streamed.replay_packed(journal, size, 1 << 16)
    deferred = replayed.state.deferred_calls()
    assert deferred is not None and isinstance(deferred.source, snapshot_pack.Packed)
    packs = sum(len(piece) for piece in deferred.source.settled)
    tracemalloc.start()
    try:
        snapshot.save_snapshot(journal, replayed.state, replayed.end, replayed.crc)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert packs > 500_000 and peak < packs // 2, (peak, packs)
    state, read = snapshot.replay_journal(journal)
    assert read.rows == [] and state == without_results(journal)
