"""The writer renews its lease while the run commits nothing (a long turn), and a
renewal that finds the run taken stops the run as a fenced commit does."""

from __future__ import annotations

import errno
import json
from pathlib import Path

import psycopg
import pytest
import trio
from trio.testing import MockClock

from crw.actors import faults
from crw.actors.journal_writer import JournalWriteError, open_journal_writer
from crw.journal import stores
from crw.journal.rows import Started
from crw.journal.store import StoreError, renewal_due
from crw.journal.stores import DB_MEMBER, store_at

LEASE = 60.0


def test_a_lease_is_renewed_a_third_of_it_after_its_last_renewal() -> None:
    """Two renewals can fail before the lease lapses."""
    assert renewal_due(100.0, LEASE) == 120.0
    assert renewal_due(0.0, 30.0) == 10.0


class _LeasedAppender:
    """An appender with a lease: records when each renewal and append happened."""

    blocking = False
    lease = LEASE

    def __init__(self, clock: MockClock) -> None:
        self._clock = clock
        self.last_seq = 0
        self.renewals: list[float] = []
        self.fenced_from: float | None = None
        self.away: set[float] = set()
        """The times (from 0) at which the database does not answer a renewal."""
        self.start = clock.current_time()

    def renew(self) -> None:
        now = self._clock.current_time()  # a worker thread's: no Trio context
        if self.fenced_from is not None and now >= self.fenced_from:
            raise StoreError(errno.ESTALE, "run r was taken by another writer", "it goes on")
        if now - self.start in self.away:
            raise StoreError(errno.EIO, "could not renew the run's lease", "check the database")
        self.renewals.append(now)

    def append(self, data: bytes, rows: int) -> None:
        self.last_seq += rows

    def close(self) -> None:
        pass


@pytest.fixture
def leased(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, autojump_clock: MockClock
) -> tuple[Path, _LeasedAppender]:
    journal = tmp_path / "r" / "journal.jsonl"
    appender = _LeasedAppender(autojump_clock)

    class _Store:
        def open_appender(self, known: object = None) -> _LeasedAppender:
            return appender

    monkeypatch.setattr(stores, "_known", {journal: _Store()})
    return journal, appender


async def test_an_idle_writer_renews_its_lease_every_third_of_it(
    leased: tuple[Path, _LeasedAppender], autojump_clock: MockClock
) -> None:
    """No commit for 100 s: renewed at 20, 40, 60, 80 and 100 s; a commit at 110 s
    renews it itself, so the next renewal is at 130 s, not 120 s."""
    journal, appender = leased
    start = trio.current_time()
    async with open_journal_writer(journal) as writer:
        await trio.sleep(110)
        await writer.commit([Started.model_validate({"call": "c", "i": 0})])
        await trio.sleep(25)
    assert [at - start for at in appender.renewals] == [20, 40, 60, 80, 100, 130]


async def test_a_renewal_the_database_does_not_answer_is_tried_again(
    leased: tuple[Path, _LeasedAppender], autojump_clock: MockClock
) -> None:
    """The database away at 20 s: the run goes on, and the renewal is made at 40 s."""
    journal, appender = leased
    appender.away = {20.0}
    async with open_journal_writer(journal):
        await trio.sleep(50)
    assert [at - appender.start for at in appender.renewals] == [40]


async def test_a_renewal_that_finds_the_run_taken_stops_the_writer(
    leased: tuple[Path, _LeasedAppender], autojump_clock: MockClock
) -> None:
    """The run is taken at 50 s: the renewal at 60 s raises JournalWriteError, which
    cancels the run's work (its long turn) and is the fault a fenced commit is."""
    journal, appender = leased
    appender.fenced_from = trio.current_time() + 50
    finished = False
    with pytest.raises(BaseExceptionGroup) as stopped:
        async with open_journal_writer(journal):
            await trio.sleep(1000)
            finished = True
    assert not finished
    assert trio.current_time() == pytest.approx(60 + appender.fenced_from - 50)
    fault = faults.classify(stopped.value, "r", journal)
    assert fault is not None and fault.reason == "journal_unwritable"
    assert "taken by another writer" in fault.line
    leaves = faults.root_causes(stopped.value)
    assert all(isinstance(leaf, JournalWriteError) for leaf in leaves)


def _pg_journal(root: Path, url: str) -> Path:
    run_dir = root / "r1"
    run_dir.mkdir(parents=True)
    (run_dir / "run.json").write_text(json.dumps({"id": "r1", DB_MEMBER: url}))
    return run_dir / "journal.jsonl"


def _lease_left(url: str) -> float:
    with psycopg.connect(url) as conn:
        found = conn.execute(
            b"SELECT extract(epoch FROM lease_until - now()) FROM crw_runs WHERE run = 'r1'"
        ).fetchone()
    assert found is not None
    return float(found[0])


async def test_a_run_committing_nothing_keeps_its_lease_in_postgres(
    tmp_path: Path, postgres_url: str, autojump_clock: MockClock
) -> None:
    """The lease lapsed in the database (as after 60 s of a long turn): the writer's
    next renewal, 20 s on, renews it without a row committed."""
    journal = _pg_journal(tmp_path, postgres_url)
    async with open_journal_writer(journal) as writer:
        await writer.commit([Started.model_validate({"call": "a", "i": 0})])
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            conn.execute(b"UPDATE crw_runs SET lease_until = now() - interval '1 second'")
        assert _lease_left(postgres_url) < 0
        await trio.sleep(25)
        assert _lease_left(postgres_url) > 50
    assert store_at(journal).last_seq() == 1


async def test_a_renewal_fenced_in_postgres_stops_the_run(
    tmp_path: Path, postgres_url: str, autojump_clock: MockClock
) -> None:
    """Another writer takes the run while this one waits on a long turn: its next
    renewal is refused, the turn is cancelled, and the run stops as fenced; the
    rows are the other writer's to go on with."""
    journal = _pg_journal(tmp_path, postgres_url)
    others = []
    with pytest.raises(BaseExceptionGroup) as stopped:
        async with open_journal_writer(journal) as writer:
            await writer.commit([Started.model_validate({"call": "a", "i": 0})])
            others.append(store_at(journal).open_appender())
            try:
                await trio.sleep(1000)
            finally:
                others[0].close()
    fault = faults.classify(stopped.value, "r1", journal)
    assert fault is not None and fault.reason == "journal_unwritable"
    assert "fenced" in fault.line
    with psycopg.connect(postgres_url) as conn:
        assert conn.execute(b"SELECT epoch FROM crw_runs").fetchall() == [(2,)]
