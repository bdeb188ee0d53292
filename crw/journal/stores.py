"""Which store keeps a run's journal: the one its run.json names (`journal_db`).

run.json is written once, at the start, before the run's journal has a row; a
run whose run.json names no database keeps its journal in its `journal.jsonl`
(every run before there were stores). The answer is kept for the process: a
command, a run process and its actors ask at every read.
"""

from __future__ import annotations

import json
from pathlib import Path

from crw.errors import InputError, RefusedError
from crw.journal.file_store import FileJournal
from crw.journal.log import JournalRead
from crw.journal.store import JournalStore

DB_MEMBER = "journal_db"
"""run.json's member naming the database that keeps the journal (absent: the file)."""
POSTGRES_SCHEMES = ("postgresql://", "postgres://")

_known: dict[Path, JournalStore] = {}


def store_at(journal: Path) -> JournalStore:
    """The store of the run whose journal file is `journal` (`<run>/journal.jsonl`),
    as its run.json (beside it) names it.

    Raises:
        InputError: run.json names a database this crw cannot use.
    """
    known = _known.get(journal)
    if known is not None:
        return known
    try:
        spec = json.loads((journal.parent / "run.json").read_bytes())
    except (OSError, ValueError):
        return FileJournal(journal)  # no run.json yet (or unreadable: its reader says so)
    url = spec.get(DB_MEMBER) if isinstance(spec, dict) else None
    store: JournalStore
    if url is None:
        store = FileJournal(journal)
    else:
        store = open_store(str(url), str(spec.get("id", journal.parent.name)), journal)
    _known[journal] = store
    return store


def keep_store(journal: Path, store: JournalStore) -> None:
    """Know `store` as the store of `journal` for this process: a run whose run
    directory is on another machine (no run.json here names it)."""
    _known[journal] = store


def forget_store(journal: Path) -> None:
    """Forget the store this process knew for `journal` (a move changed its run.json)."""
    _known.pop(journal, None)


def open_store(url: str, run: str, journal: Path) -> JournalStore:
    """The store a database URL names for run `run` (`journal` names it in messages).

    Raises:
        InputError: the URL is not one this crw can keep a journal in.
    """
    check_db_url(url)
    from crw.journal.postgres import PostgresJournal  # psycopg only for such runs

    return PostgresJournal(url, run, journal)


def check_db_url(url: str) -> None:
    """Refuse a database URL this crw cannot keep a journal in.

    Raises:
        InputError: one line: what, and how to fix it.
    """
    if not url.startswith(POSTGRES_SCHEMES):
        raise InputError(
            f"--db {url!r} is not a PostgreSQL URL; give postgresql://USER@HOST/DATABASE "
            "(or leave --db and CRW_DB unset for the journal file)"
        )


def journal_db_ready(url: str) -> None:
    """Check that a run can keep its journal at `url`: a PostgreSQL URL whose
    database answers, its journal's table made where it is missing.

    Raises:
        InputError: not a PostgreSQL URL.
        RefusedError: the database cannot be reached (one line: which, why, what to do).
    """
    check_db_url(url)
    from crw.journal.postgres import ensure_schema

    try:
        ensure_schema(url)
    except OSError as err:
        raise RefusedError(
            f"{err.strerror}; start the database or fix --db / CRW_DB, then start again"
        ) from err


def read_run_journal(journal: Path) -> JournalRead:
    """The whole batches of the run's journal, from whichever store keeps it
    (`crw.journal.log.read_journal` for a file)."""
    return store_at(journal).read()
