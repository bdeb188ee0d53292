"""A run removed from the database (`crw flow rm`, `gc`) while a writer takes it:
a run imported and never taken has no lease row for the removal to lock, so the
removal inserts one (insert-or-lock) in its transaction. A take in flight is
waited for, and its lease then refuses the removal; a take after the removal
finds the rows it read gone and takes nothing, writes nothing. On the throwaway
cluster."""

from __future__ import annotations

import errno
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest
import trio

from crw.actors.journal_writer import JournalWriteError, open_journal_writer
from crw.journal.pg_lease import Lease
from crw.journal.pg_remove import remove_run_rows, remove_unheld_run
from crw.journal.postgres import PostgresJournal
from crw.journal.store import StoreError
from crw.journal.stores import store_at
from tests.cli.conftest import Crw
from tests.cli.test_housekeeping import _run
from tests.cli.test_remove_db import ENDED, STARTED, _counts, _flow

DEADLINE = 60.0
"""Seconds a condition may take on a loaded machine."""


def _imported(crw: Crw, url: str, run_id: str) -> Path:
    """An ended run moved into the database, never taken: no crw_runs row."""
    run = _run(crw, run_id, STARTED, ENDED)
    moved = _flow(crw, "import", run_id, "--db", url)
    assert moved.code == 0, moved.stderr
    assert _counts(url, run_id)["crw_runs"] == 0
    return run.journal


def _waiting_on_a_lock(url: str) -> bool:
    with psycopg.connect(url, autocommit=True) as conn:
        found = conn.execute(
            b"SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
            b"AND query LIKE '%%crw_runs%%'"
        ).fetchone()
    return found is not None and found[0] > 0


@pytest.mark.parametrize("remove", [remove_unheld_run, remove_run_rows])
def test_a_removal_waits_for_a_take_in_flight_of_a_run_never_taken(
    crw: Crw,
    postgres_url: str,
    monkeypatch: pytest.MonkeyPatch,
    remove: Callable[[str, str], Any],
) -> None:
    """Machine b's take of the imported run is in flight (its lease row inserted,
    not committed) when a's removal starts: the removal waits for it, then finds
    b's lease and removes nothing."""
    monkeypatch.setenv("CRW_MACHINE", "a")
    run_id = "r-race-" + remove.__name__.split("_")[1]
    _imported(crw, postgres_url, run_id)
    taker = psycopg.connect(postgres_url)
    removed: list[Any] = []
    try:
        taker.execute(b"INSERT INTO crw_runs VALUES (%s, 1, 'b', now() + interval '1h')", (run_id,))
        removal = threading.Thread(target=lambda: removed.append(remove(postgres_url, run_id)))
        removal.start()
        deadline = time.monotonic() + DEADLINE
        while removal.is_alive() and not _waiting_on_a_lock(postgres_url):
            assert time.monotonic() < deadline, "the removal neither waited nor ended"
            time.sleep(0.05)
        taker.commit()
        removal.join(DEADLINE)
    finally:
        taker.close()
    assert isinstance(removed[0], Lease) and removed[0].machine == "b"
    assert _counts(postgres_url, run_id)["crw_journal"] == 2


def test_a_take_after_the_removal_of_the_rows_it_read_takes_nothing(
    crw: Crw, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """b read the imported run's rows, then a removed the run, then b takes it:
    refused (the rows it read are gone), and nothing of the run is in the database."""
    journal = _imported(crw, postgres_url, "r-race-late")
    monkeypatch.setenv("CRW_MACHINE", "b")
    store = PostgresJournal(postgres_url, "r-race-late", journal)
    read = store.read()
    assert read.last_seq == 2
    monkeypatch.setenv("CRW_MACHINE", "a")
    assert remove_unheld_run(postgres_url, "r-race-late") == 2 + 1  # its rows, its files
    monkeypatch.setenv("CRW_MACHINE", "b")
    with pytest.raises(StoreError) as refused:
        store.open_appender(read).close()
    assert refused.value.errno == errno.ENOENT
    assert "was removed from the " in str(refused.value.strerror)
    assert set(_counts(postgres_url, "r-race-late").values()) == {0}


def test_a_run_process_taking_a_removed_run_says_it_is_gone(
    crw: Crw, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run process's writer, opened on the rows it read before the removal,
    stops with the store's line and its fix, not a disk's."""
    journal = _imported(crw, postgres_url, "r-race-writer")
    monkeypatch.setenv("CRW_MACHINE", "b")
    read = store_at(journal).read()
    assert remove_unheld_run(postgres_url, "r-race-writer") == 3

    async def open_writer() -> None:
        async with open_journal_writer(journal, known=read):
            raise AssertionError("the writer opened a removed run")

    with pytest.raises(JournalWriteError) as refused:
        trio.run(open_writer)
    said = str(refused.value)
    assert "was removed from the " in said and "nothing was written to it" in said
    assert said.endswith("it is gone: start its workflow again with crw flow start")
    assert set(_counts(postgres_url, "r-race-writer").values()) == {0}
