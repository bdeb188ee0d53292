"""The exit snapshot of a run on PostgreSQL takes a file run's path: the journal's
size from the store (so the exit collects before its replay, and packs its calls
as a file run's does), its rows read a piece at a time, never whole, and the
snapshot kept in `crw_snapshots`. Real PostgreSQL (tests/postgres.py)."""

from __future__ import annotations

import gc
from pathlib import Path

import psycopg
import pytest
import trio

from crw.actors import run as run_module
from crw.engine.run.rundir import RunDir
from crw.journal import snapshot, snapshot_pack, streamed
from crw.journal.postgres import PostgresJournal
from crw.journal.rows import Completed, Prepared, RowModel, Started, ThreadStarted, Tokens
from crw.journal.stores import store_at
from tests.journal.test_postgres_store import _run_dir, _write
from tests.journal.test_snapshot import without_results
from tests.journal.test_streamed import _batch_sizes

CALLS = 300


def _commits() -> list[list[RowModel]]:
    """A started row, then each call's three rows in a batch (as test_snapshot's)."""
    commits: list[list[RowModel]] = [[Started(backend="session")]]
    for n in range(CALLS):
        call = f"n{n}.1"
        commits.append(
            [
                Prepared(call=call, node=f"n{n}", role="executor"),
                ThreadStarted(call=call, thread_id=f"th-{n}", attempt=1, model="m"),
                Completed(call=call, result={"n": n}, tokens=Tokens(input=n, total=n)),
            ]
        )
    return commits


def test_a_database_run_exit_collects_and_reads_its_rows_a_piece_at_a_time(
    tmp_path: Path, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: the exit snapshot of a database run, as a file run's. Its size is the
    store's (its journal.jsonl is empty): the exit collects before the replay
    when it is big; the rows come a piece at a time (never the journal whole in
    one read); the snapshot, kept in the database, reads back as the whole
    journal's replay, its calls in fewer packs than SETTLED_CHUNKS."""
    commits = _commits()
    file_run = RunDir(tmp_path / "file" / "r1")
    file_run.create()
    trio.run(_write, file_run.journal, commits)
    db_run = RunDir(_run_dir(tmp_path / "db", "r1", postgres_url).parent)
    trio.run(_write, db_run.journal, commits)
    store = store_at(db_run.journal)
    assert isinstance(store, PostgresJournal)
    assert store.size() == file_run.journal.stat().st_size > 0
    assert not db_run.journal.exists()  # a database run's is empty, or not there

    def whole(*args: object) -> bytes:
        raise AssertionError("the exit read the journal whole")

    monkeypatch.setattr(PostgresJournal, "read_from", whole)
    monkeypatch.setattr(PostgresJournal, "open_bytes", whole)
    collected: list[int] = []

    def collect(*args: object) -> int:
        collected.append(1)
        return 0

    monkeypatch.setattr(gc, "collect", collect)
    monkeypatch.setattr(run_module, "COLLECT_BEFORE_SNAPSHOT", 4096)
    monkeypatch.setattr(streamed, "PIECE", 4096)
    sizes = _batch_sizes(monkeypatch)
    run_module._keep_snapshot(db_run)
    assert collected == [1]
    assert sum(sizes) == 1 + 3 * CALLS and 0 < max(sizes) <= 4096 // 100
    monkeypatch.undo()

    with psycopg.connect(postgres_url) as conn:
        kept = conn.execute(b"SELECT last_seq, end_byte FROM crw_snapshots").fetchall()
    assert kept == [(1 + 3 * CALLS, store.size())]
    state, read = snapshot.replay_journal(db_run.journal)
    assert read.rows == [] and not (db_run.root / snapshot.SNAPSHOT).exists()
    deferred = state.deferred_calls()
    assert deferred is not None and isinstance(deferred.source, snapshot_pack.Packed)
    assert 1 < len(deferred.source.settled) < snapshot_pack.SETTLED_CHUNKS
    run_module._keep_snapshot(file_run)
    file_state = snapshot.replay_journal(file_run.journal)[0]
    assert state == file_state == without_results(file_run.journal)
