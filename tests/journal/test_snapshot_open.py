"""The replay snapshot of a run that goes on: `next` reads it at every ask, and
builds only the calls that are not settled (a pool's worth), not every call the
run ever ran; the state is the whole journal's all the same."""

from __future__ import annotations

import gc
import marshal
from pathlib import Path
from typing import Any
from zlib import crc32

import pytest

from crw.journal import snapshot, snapshot_pack
from crw.journal.log import encode_batch, encode_body, read_journal
from crw.journal.replay import CallState, RunState, replay
from crw.journal.rows import Completed, Decision, Held, Prepared, Started, StepPublished

STAMP = "2026-12-01T00:00:00.000000Z"


def _write(path: Path, seq: int, rows: list[Any]) -> int:
    with path.open("ab") as file:
        for row in rows:
            file.write(encode_batch(seq, STAMP, [encode_body(row)]))
            seq += 1
    return seq


def _call(n: int, *, done: bool) -> list[Any]:
    call = f"n{n}.1"
    rows: list[Any] = [Prepared(call=call, node=f"n{n}", role="explorer")]
    rows += [StepPublished(call=call, k=1, attempt=1, action="spawn")]
    return rows + ([Completed(call=call, result={"n": n})] if done else [])


def _run(journal: Path) -> int:
    """A session run: 40 calls completed, the last 3 waiting for their subagents,
    interleaved as a pool leaves them; snapshotted."""
    rows: list[Any] = [Started(backend="session")]
    for n in range(43):
        rows += _call(n, done=n not in (5, 20, 42))
    seq = _write(journal, 1, rows)
    data = journal.read_bytes()  # kept as the run's process keeps it when it leaves
    snapshot.save_snapshot(journal, replay(read_journal(journal).rows), len(data), crc32(data))
    return seq


def calls_alive() -> int:
    gc.collect()
    return sum(type(obj) is CallState for obj in gc.get_objects())


def same(state: RunState, journal: Path) -> bool:
    """`state` is the whole journal's replay, calls in its order (results aside: a
    snapshot keeps none, a row after it does)."""
    expected = replay(read_journal(journal).rows)
    for call in [*state.calls.values(), *expected.calls.values()]:
        call.result = None
    return list(state.calls) == list(expected.calls) and state == expected


def test_a_live_runs_read_builds_only_the_calls_not_settled(tmp_path: Path) -> None:
    """spec: CMD-NEXT-1. A read of a live run from its snapshot builds the calls
    without a settled state and the ones the rows after it add, answers the run's
    state from them, and builds the rest, in the journal's order, when read."""
    journal = tmp_path / "journal.jsonl"
    seq = _run(journal)
    _write(journal, seq, [Completed(call="n20.1", result={}), *_call(43, done=False)])
    before = calls_alive()
    state, read = snapshot.replay_journal(journal, live=True)
    assert len(read.rows) == 3
    assert state.state == "waiting_session"
    assert calls_alive() == before + 4  # n5, n20, n42 from the snapshot; n43 from the rows
    assert same(state, journal)
    assert calls_alive() - before == 44


def test_a_row_that_names_a_settled_call_builds_them_all(tmp_path: Path) -> None:
    """spec: CMD-NEXT-1. A settled call moved on by a row after the snapshot (held,
    then retried) reads as the whole journal does."""
    journal = tmp_path / "journal.jsonl"
    seq = _run(journal)
    rows = [Held(call="n7.1", reason="schema_invalid"), Decision(call="n7.1", choice="retry")]
    _write(journal, seq, rows)
    state, _ = snapshot.replay_journal(journal, live=True)
    assert state.calls["n7.1"].state == "prepared" and state.state == "waiting_session"
    assert same(state, journal)


def test_a_snapshot_written_from_a_snapshots_state_keeps_every_call_in_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: CMD-NEXT-1. A reader that read from a snapshot writes the next one
    without building the settled calls; read back, it is the whole journal's
    state, calls in the order the journal first named them."""
    journal = tmp_path / "journal.jsonl"
    seq = _run(journal)
    monkeypatch.setattr(snapshot, "REFRESH_BYTES", 1)  # every read writes one
    seq = _write(journal, seq, [Completed(call="n42.1", result={}), *_call(43, done=False)])
    before = calls_alive()
    first, _ = snapshot.replay_journal(journal, live=True)
    assert calls_alive() == before + 4  # n5, n20, n42 from the snapshot; n43 from the rows
    del first
    _write(journal, seq, [Completed(call="n5.1", result={}), *_call(44, done=True)])
    state, read = snapshot.replay_journal(journal, live=True)
    assert len(read.rows) == 4
    assert same(state, journal)
    again, read = snapshot.replay_journal(journal, live=True)
    assert read.rows == [] and same(again, journal)


def test_a_snapshot_written_from_a_snapshots_state_unmarshals_none_of_its_settled_calls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: CMD-NEXT-1. The owner's `next` writes the snapshot of a run that goes
    on once in a share of its journal: the calls settled before it are kept as the
    snapshot held them, not unmarshalled and marshalled again (most calls of a big
    run), and the calls settled since are added; read back, the state is the
    journal's, however many snapshots were written one from another."""
    journal = tmp_path / "journal.jsonl"
    seq = _run(journal)
    monkeypatch.setattr(snapshot, "REFRESH_BYTES", 1)  # every read writes one
    loads, pack = marshal.loads, snapshot_pack.pack_calls
    unmarshalled: list[int] = []  # the bytes each save's packing unmarshalled

    def counted_pack(state: RunState) -> Any:
        def counted(data: bytes) -> Any:
            unmarshalled[-1] += len(data)
            return loads(data)

        unmarshalled.append(0)
        monkeypatch.setattr(marshal, "loads", counted)
        try:
            return pack(state)
        finally:
            monkeypatch.setattr(marshal, "loads", loads)

    monkeypatch.setattr(snapshot, "pack_calls", counted_pack)
    settled = len(journal.with_name(snapshot.SNAPSHOT).read_bytes())
    saves = 2 * snapshot_pack.SETTLED_CHUNKS
    for n in range(43, 43 + saves):
        seq = _write(journal, seq, _call(n, done=True))
        state, _ = snapshot.replay_journal(journal, live=True)
        assert same(state, journal)
    assert len(unmarshalled) == saves
    assert (
        len([n for n in unmarshalled if n > settled // 4]) == saves // snapshot_pack.SETTLED_CHUNKS
    )
    again, read = snapshot.replay_journal(journal, live=True)
    assert read.rows == [] and same(again, journal)
