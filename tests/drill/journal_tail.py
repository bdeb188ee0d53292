"""A drill's reader of one run's journal, cheap to call again and again while it
waits for a row.

`crw.journal.stores.read_run_journal` reads the whole journal at each call, and
on PostgreSQL opens a connection for it: the database starts a backend process
for each. A drill that polls a run's rows every few milliseconds (for the row it
waits for, or the new run process it will kill) made the cluster start hundreds of
backends a second. `JournalTail` reads the same rows, the same way
(`crw.journal.log.decode` of the store's bytes):

- a journal file is read again only when it changed (its inode, size, mtime or
  ctime), and then whole, as `read_run_journal` reads it (a damaged or truncated
  file reads as it does there);
- a journal in PostgreSQL is read over one connection the tail keeps open, the
  rows after the last seq it read each time (the store appends rows keyed by
  seq and never changes one), as `PostgresJournal.read(after)` does.

`close` ends the kept connection.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from crw.journal.log import JournalRead, decode
from crw.journal.pg_statements import TABLE
from crw.journal.stores import DB_MEMBER, read_run_journal

_ROWS_AFTER = (
    f"SELECT string_agg(line, ''::bytea ORDER BY seq) FROM {TABLE} WHERE run = %s AND seq > %s"
)


class JournalTail:
    """The rows of the journal whose file is `journal` (`<run>/journal.jsonl`)."""

    def __init__(self, journal: Path) -> None:
        self.journal = journal
        self._url: str | None = None
        self._run = journal.parent.name
        self._known = False
        self._seen: tuple[int, ...] | None = None
        self._rows: list[dict[str, Any]] = []
        self._conn: Any = None

    def rows(self) -> list[dict[str, Any]]:
        """Every whole row, as `read_run_journal(journal).rows` reads them now."""
        if not self._known:
            self._know_store()
        if self._url is None:
            self._read_file()
        else:
            self._read_database(self._url)
        return list(self._rows)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _know_store(self) -> None:
        """Which store keeps the journal, once run.json (written before the first
        row) says so."""
        try:
            spec = json.loads((self.journal.parent / "run.json").read_bytes())
        except (OSError, ValueError):
            return  # no run.json yet: no row yet either
        self._known = True
        if isinstance(spec, dict) and spec.get(DB_MEMBER):
            self._url = str(spec[DB_MEMBER])
            self._run = str(spec.get("id", self._run))

    def _read_file(self) -> None:
        try:
            stat = os.stat(self.journal)
        except FileNotFoundError:
            self._seen, self._rows = None, []
            return
        seen = (stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)
        if seen != self._seen:
            self._rows = read_run_journal(self.journal).rows
            self._seen = seen

    def _read_database(self, url: str) -> None:
        if self._conn is None:
            from crw.journal.postgres import connect

            self._conn = connect(url)
            self._conn.autocommit = True
        import psycopg

        after = self._rows[-1]["seq"] if self._rows else 0
        try:
            found = self._conn.execute(_ROWS_AFTER.encode(), (self._run, after), binary=True)
        except psycopg.errors.UndefinedTable:
            return  # no journal's table yet: no row (autocommit: the connection goes on)
        data = found.fetchone()
        if data is not None and data[0] is not None:
            read: JournalRead = decode(bytes(data[0]), self.journal, after=after)
            self._rows += read.rows
