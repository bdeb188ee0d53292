"""The run process's snapshot: the journal replayed a piece of whole batches at a
time, the same state as a replay of all of it, never all its rows at once."""

from __future__ import annotations

import zlib
from pathlib import Path
from typing import Any

import pytest

import crw.journal.framing as framing
import crw.journal.log as log
from crw.actors import run as run_module
from crw.engine.run.rundir import RunDir
from crw.journal import snapshot, streamed
from crw.journal.log import encode_batch, encode_body, read_journal
from crw.journal.replay import replay
from crw.journal.rows import Completed, Prepared, StepPublished
from tests.journal.decoding import count_decoded_lines
from tests.journal.test_snapshot import STAMP, _append, without_results


def _batch_sizes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The rows of each piece decoded at once from now on."""
    sizes: list[int] = []
    whole_batches = framing.whole_batches

    def spying(data: bytes, after: int) -> Any:
        read = whole_batches(data, after)
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


def test_the_snapshot_a_leaving_process_writes_is_byte_for_byte_the_whole_replays(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run process's exit snapshot (the journal replayed a piece at a time,
    its header and payload written apart) is the file a snapshot of the journal
    replayed at once is, and a replay from it is the replay from scratch."""
    whole, pieced = RunDir(tmp_path / "whole"), RunDir(tmp_path / "pieced")
    for run in (whole, pieced):
        run.create()
        _append(run.journal, 1, range(300))
    monkeypatch.setattr(streamed, "PIECE", 4096)
    run_module._keep_snapshot(pieced)
    data = whole.journal.read_bytes()
    state = replay(read_journal(whole.journal).rows)
    snapshot.save_snapshot(whole.journal, state, len(data), zlib.crc32(data))
    written = (pieced.root / snapshot.SNAPSHOT).read_bytes()
    assert written == (whole.root / snapshot.SNAPSHOT).read_bytes()
    assert written[:9] == b"%08x\n" % zlib.crc32(written[9:])
    assert snapshot.replay_journal(pieced.journal)[0] == without_results(pieced.journal)


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
