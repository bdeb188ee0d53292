"""The replay snapshot of a run on PostgreSQL, kept in the database (`crw_snapshots`):
`status`'s read (`replay_journal`) takes it and the rows after it in one query,
never the journal whole, from any machine. Real PostgreSQL (tests/postgres.py)."""

from __future__ import annotations

import zlib
from pathlib import Path

import psycopg
import trio

from crw.journal.log import decode
from crw.journal.postgres import PostgresJournal
from crw.journal.replay import replay
from crw.journal.snapshot import SNAPSHOT, replay_journal, save_snapshot
from crw.journal.stores import store_at
from tests.journal.test_postgres_store import _commits, _run_dir, _write


def _prefix_snapshot(journal: Path, rows: int) -> int:
    """Keep a snapshot of the journal's first `rows` rows (a batch's end) whose state
    counts 1,000 processes more than they started (a mark the rows after it add
    to: each of them is a started row); its end."""
    data = store_at(journal).read_from(0)
    read = decode(data, journal)
    state = replay(read.rows[:rows])
    end = sum(len(line) + 1 for line in data.split(b"\n")[:rows])
    state.processes += 1000
    save_snapshot(journal, state, end, zlib.crc32(data[:end]))
    return end


def test_status_reads_the_database_snapshot_and_the_rows_after_it(
    tmp_path: Path, postgres_url: str
) -> None:
    """A snapshot of the first 5 rows kept in the database (none
    beside the journal): the read folds the 15 rows after it into it (its mark
    kept, every call there), as from a file's snapshot and tail."""
    journal = _run_dir(tmp_path, "r1", postgres_url)
    trio.run(_write, journal, _commits())
    whole = replay(store_at(journal).read().rows)
    end = _prefix_snapshot(journal, 5)
    assert not (journal.parent / SNAPSHOT).exists()
    with psycopg.connect(postgres_url) as conn:
        kept = conn.execute(b"SELECT last_seq, end_byte FROM crw_snapshots").fetchall()
    assert kept == [(5, end)]

    state, read = replay_journal(journal)
    assert state.processes == 1020
    assert [row["seq"] for row in read.rows] == list(range(6, 21))
    assert (state.last_seq, list(state.calls)) == (20, list(whole.calls))


def test_a_snapshot_that_ends_at_no_row_end_is_not_taken(tmp_path: Path, postgres_url: str) -> None:
    """The snapshot's end is not where its last row ends (rows of another journal
    under the run's id): it is left, the journal read whole."""
    journal = _run_dir(tmp_path, "r1", postgres_url)
    trio.run(_write, journal, _commits())
    _prefix_snapshot(journal, 5)
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(b"UPDATE crw_snapshots SET end_byte = end_byte - 1")
    state, read = replay_journal(journal)
    assert state.processes == 20
    assert (len(read.rows), state.last_seq) == (20, 20)


def test_the_snapshot_is_kept_in_the_database_only(tmp_path: Path, postgres_url: str) -> None:
    """A reader that writes the snapshot (the run ended beyond it) keeps it in the
    database: the next read on any machine takes it; no file beside the journal."""
    journal = _run_dir(tmp_path, "r1", postgres_url)
    trio.run(_write, journal, _commits())
    store = store_at(journal)
    assert isinstance(store, PostgresJournal)
    state = replay(store.read().rows)
    data = store.read_from(0)
    save_snapshot(journal, state, len(data), zlib.crc32(data))
    sealed, start, tail = store.snapshot_tail()
    assert sealed is not None and (start, tail) == (len(data), b"")
    assert not (journal.parent / SNAPSHOT).exists()
