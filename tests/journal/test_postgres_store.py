"""The PostgreSQL journal store: the same rows, bytes and replay as the journal file.

Real PostgreSQL (tests/postgres.py's throwaway cluster), no mock of the database.
"""

from __future__ import annotations

import errno
import json
from pathlib import Path

import psycopg
import pytest
import trio

from crw.actors.journal_writer import JournalWriteError, open_journal_writer
from crw.clock import fixed_clock
from crw.journal.file_store import FileJournal
from crw.journal.log import encode_batch, encode_body, read_journal
from crw.journal.postgres import CHANNEL, PostgresJournal, connect
from crw.journal.replay import replay
from crw.journal.rows import RowModel, Started
from crw.journal.snapshot import replay_journal
from crw.journal.stores import DB_MEMBER, store_at
from tests.deadlines import LOADED

STAMP = "2026-12-06T14:00:00.000000Z"


def _run_dir(root: Path, run: str, url: str | None) -> Path:
    """A run directory whose run.json names `url` as its journal's store (None: the file)."""
    run_dir = root / run
    run_dir.mkdir(parents=True)
    spec: dict[str, object] = {"id": run}
    if url is not None:
        spec[DB_MEMBER] = url
    (run_dir / "run.json").write_text(json.dumps(spec))
    return run_dir / "journal.jsonl"


def _commits() -> list[list[RowModel]]:
    """Batches of varied sizes and text: non-ASCII, a lone surrogate, an escape."""
    texts = ["plain", "naïve ☃ — 東京", "lone \ud800 surrogate", 'quote " and \\ back', "nl\nin"]
    return [
        [
            Started.model_validate({"call": f"c{n}", "i": i, "text": texts[(n + i) % len(texts)]})
            for i in range(size)
        ]
        for n, size in enumerate([1, 3, 1, 7, 2, 1, 5])
    ]


async def _write(journal: Path, commits: list[list[RowModel]]) -> None:
    async with open_journal_writer(journal, clock=fixed_clock(STAMP)) as writer:
        for rows in commits:
            await writer.commit(rows)


async def test_rows_from_postgres_replay_byte_for_byte_as_from_the_file(
    tmp_path: Path, postgres_url: str
) -> None:
    """The same commits through the journal writer to a file and to PostgreSQL:
    the same bytes (each row's framing and checksum), rows, and replay, whole and
    read from a seq, and through the replay snapshot's reader."""
    file_journal = _run_dir(tmp_path / "file", "r1", None)
    pg_journal = _run_dir(tmp_path / "pg", "r1", postgres_url)
    commits = _commits()
    await _write(file_journal, commits)
    await _write(pg_journal, commits)
    pg, file = store_at(pg_journal), store_at(file_journal)
    assert isinstance(pg, PostgresJournal) and isinstance(file, FileJournal)

    file_bytes = file_journal.read_bytes()
    assert pg.read_from(0) == file_bytes
    with pg.open_bytes() as stream:
        assert stream.read() == file_bytes
    from_file, from_pg = read_journal(file_journal), pg.read()
    assert from_pg.rows == from_file.rows
    assert (from_pg.end, from_pg.last_seq, from_pg.torn) == (len(file_bytes), 20, None)
    assert replay(from_pg.rows) == replay(from_file.rows)
    assert pg.read(after=6).rows == from_file.rows[6:]
    assert pg.last_seq() == 20
    offset = len(b"".join(file_bytes.splitlines(keepends=True)[:4]))
    assert pg.read_from(offset) == file_bytes[offset:]
    assert replay_journal(pg_journal)[0] == replay_journal(file_journal)[0]


async def test_a_group_commit_is_one_transaction(tmp_path: Path, postgres_url: str) -> None:
    """A group whose insert fails (a row at one of its seqs is there already) leaves
    none of its rows: the commit raises JournalWriteError, the rows before stay."""
    journal = _run_dir(tmp_path, "r1", postgres_url)
    await _write(journal, _commits()[:1])
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(
            b"INSERT INTO crw_journal (run, seq, at_byte, line) VALUES ('r1', 3, 999999, 'x')"
        )
    async with open_journal_writer(journal, clock=fixed_clock(STAMP)) as writer:
        with pytest.raises(JournalWriteError, match="duplicate key"):
            await writer.commit(_commits()[1])  # seqs 2-4: 3 is taken
    with psycopg.connect(postgres_url) as conn:
        seqs = conn.execute(b"SELECT seq FROM crw_journal ORDER BY seq").fetchall()
    assert seqs == [(1,), (3,)]


async def test_concurrent_committers_share_group_commits(tmp_path: Path, postgres_url: str) -> None:
    """Sixteen committers at once: seqs contiguous, every commit's rows whole and
    together, in fewer transactions than commits (group commit)."""
    journal = _run_dir(tmp_path, "r1", postgres_url)
    async with (
        open_journal_writer(journal, clock=fixed_clock(STAMP)) as writer,
        trio.open_nursery() as nursery,
    ):
        for committer in range(16):

            async def commit(committer: int = committer) -> None:
                for n in range(5):
                    rows = [
                        Started.model_validate({"call": f"c{committer}", "n": n, "i": i})
                        for i in range(3)
                    ]
                    await writer.commit(rows)

            nursery.start_soon(commit)
    rows = store_at(journal).read().rows
    assert [row["seq"] for row in rows] == list(range(1, 241))
    for start in range(0, 240, 3):
        batch = rows[start : start + 3]
        assert [(row["call"], row["n"]) for row in batch] == [(batch[0]["call"], batch[0]["n"])] * 3
        assert [row["i"] for row in batch] == [0, 1, 2]
    with psycopg.connect(postgres_url) as conn:
        found = conn.execute(b"SELECT count(DISTINCT xmin::text) FROM crw_journal").fetchone()
    assert found is not None and found[0] < 80


def test_the_writer_commits_with_synchronous_commit_on(postgres_url: str) -> None:
    """A database whose default is synchronous_commit off: the store's connection
    has it on, so a row acknowledged is durable."""
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        name = conn.info.dbname
        conn.execute(f"ALTER DATABASE {name} SET synchronous_commit = off".encode())
    with psycopg.connect(postgres_url) as conn:
        assert conn.execute(b"SHOW synchronous_commit").fetchone() == ("off",)
    with connect(postgres_url) as conn:
        assert conn.execute(b"SHOW synchronous_commit").fetchone() == ("on",)


def _batch(seq: int, text: str) -> bytes:
    return encode_batch(seq, STAMP, [encode_body(Started.model_validate({"call": text}))])


def _lines(url: str) -> list[tuple[int, str]]:
    with psycopg.connect(url) as conn:
        found = conn.execute(b"SELECT seq, line FROM crw_journal ORDER BY seq").fetchall()
    return [(seq, json.loads(bytes(line))["call"]) for seq, line in found]


def test_a_fenced_writer_commits_nothing_and_stays_fenced(
    tmp_path: Path, postgres_url: str
) -> None:
    """A second writer takes the run (its epoch raised): the first one's next group
    commit changes nothing and raises, and so does every one after it."""
    store = store_at(_run_dir(tmp_path, "r1", postgres_url))
    first = store.open_appender()
    first.append(_batch(1, "a"), 1)
    second = store.open_appender()
    with pytest.raises(OSError, match="fenced") as fenced:
        first.append(_batch(2, "late"), 1)
    assert fenced.value.errno == errno.ESTALE
    second.append(_batch(2, "b"), 1)
    with pytest.raises(OSError, match="fenced"):
        first.append(_batch(3, "later"), 1)
    assert _lines(postgres_url) == [(1, "a"), (2, "b")]
    first.close()
    second.close()


def test_another_machine_takes_the_run_only_once_the_lease_lapsed(
    tmp_path: Path, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Machine m2 is refused the run m1 writes while m1's lease runs; once it lapsed
    (m1's machine died) m2 takes it, and m1's late commit is refused."""
    store = store_at(_run_dir(tmp_path, "r1", postgres_url))
    monkeypatch.setenv("CRW_MACHINE", "m1")
    first = store.open_appender()
    first.append(_batch(1, "a"), 1)
    monkeypatch.setenv("CRW_MACHINE", "m2")
    with pytest.raises(OSError, match="held by machine m1 until") as held:
        store.open_appender()
    assert held.value.errno == errno.EBUSY
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(b"UPDATE crw_runs SET lease_until = now() - interval '1 second'")
    second = store.open_appender()
    with pytest.raises(OSError, match="fenced"):
        first.append(_batch(2, "late"), 1)
    second.append(_batch(2, "b"), 1)
    assert _lines(postgres_url) == [(1, "a"), (2, "b")]
    with psycopg.connect(postgres_url) as conn:
        assert conn.execute(b"SELECT epoch, machine FROM crw_runs").fetchall() == [(2, "m2")]
    first.close()
    second.close()


def test_a_group_commit_notifies_its_run_and_last_seq(tmp_path: Path, postgres_url: str) -> None:
    """A listener on the journal's channel hears `RUN SEQ` once the group commits."""
    store = store_at(_run_dir(tmp_path, "r1", postgres_url))
    appender = store.open_appender()
    with psycopg.connect(postgres_url, autocommit=True) as listener:
        listener.execute(f"LISTEN {CHANNEL}".encode())
        appender.append(_batch(1, "a") + _batch(2, "b"), 2)
        heard = [n.payload for n in listener.notifies(timeout=LOADED, stop_after=1)]
    assert heard == ["r1 2"]
    appender.close()
