"""The PostgreSQL store: a run's journal as rows of the table `crw_journal`.

One row a journal line, keyed `(run, seq)`: `line` holds the line's bytes exactly
as the file journal frames them (`crw.journal.framing`: its `commit_seq`, its
CRC-32, its newline) and `at_byte` the line's offset in the journal's bytes, so
the rows read back in seq order are the bytes the file would hold, and every
reader decodes and replays them as it does a file's. A group commit is one
statement and so one transaction (`pg_statements.COMMIT_GROUP`: the fence, the
lines inserted from `unnest` of three arrays, the notify), one round trip,
`synchronous_commit` on: a row acknowledged is durable on the server. A
transaction is whole or absent, so the store never holds a torn tail. The
run's replay snapshot is kept in the database too (`crw_snapshots`), so a
reader on any machine reads a run as its snapshot and the rows after it. A writer
takes its run, and renews its lease, by `crw.journal.pg_take`.

psycopg 3 is blocking here: the journal writer runs every append in its worker
thread (`JournalAppender.blocking`), and a command's read is a short blocking
query, as a file read is (psycopg's async side is asyncio's, not Trio's).
"""

from __future__ import annotations

import errno
import io
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from crw.journal import pg_driver  # noqa: F401  (psycopg imported without importlib.metadata)
from crw.journal.log import JournalRead, decode
from crw.journal.pg_machine import LEASE_SECONDS as LEASE_SECONDS  # its importers'
from crw.journal.pg_machine import lease_seconds as lease_seconds
from crw.journal.pg_machine import machine_id as machine_id
from crw.journal.pg_pieces import SIZE, PieceReader
from crw.journal.pg_run_files import FILES, keep_run_files
from crw.journal.pg_statements import (
    COMMIT_GROUP,
    KEEP_SNAPSHOT,
    RUNS,
    SNAPSHOT_AND_TAIL,
    SNAPSHOT_SCHEMA,
    SNAPSHOTS,
    TABLE,
)
from crw.journal.pg_take import RENEW, store_error, take
from crw.journal.pg_wake import PostgresWake
from crw.journal.store import StoreError

if TYPE_CHECKING:
    import psycopg

    Conn = psycopg.Connection[tuple[Any, ...]]

CHANNEL = "crw_journal"
"""The channel each group commit notifies, in its transaction: `RUN SEQ`, the run
and its last seq (a hint for live views, which read the rows by seq)."""
SCHEMA = f"""
CREATE TABLE IF NOT EXISTS {TABLE} (
    run text NOT NULL,
    seq bigint NOT NULL,
    at_byte bigint NOT NULL,
    line bytea NOT NULL,
    PRIMARY KEY (run, seq)
);
CREATE UNIQUE INDEX IF NOT EXISTS {TABLE}_at ON {TABLE} (run, at_byte);
CREATE TABLE IF NOT EXISTS {RUNS} (
    run text PRIMARY KEY,
    epoch bigint NOT NULL,
    machine text NOT NULL,
    lease_until timestamptz NOT NULL
);
CREATE TABLE IF NOT EXISTS {FILES} (
    run text NOT NULL,
    name text NOT NULL,
    data bytea NOT NULL,
    PRIMARY KEY (run, name)
);
"""
"""The journal's table (a line, its run, its seq and its offset in the run's
bytes), the runs' (each run's writer: its epoch, machine and lease) and the
run's files another machine's resume makes its directory from
(`crw.journal.pg_run_files`)."""
_PRESENT = (
    "SELECT count(to_regclass(t)) + (SELECT count(*) FROM pg_attribute WHERE attrelid = "
    f"to_regclass('{SNAPSHOTS}') AND attname = 'summary' AND NOT attisdropped) "
    "FROM unnest(%s::text[]) AS t"
)
TABLES = [TABLE, RUNS, FILES, SNAPSHOTS]
"""Every table the store keeps: a database with them all (and the snapshots' summary
column) is not asked to create one."""
_SCHEMA_LOCK = 0x63727700
"""The advisory lock two first writers take so that one creates the table."""
_BYTES_FROM = (
    f"SELECT string_agg(line, ''::bytea ORDER BY seq) FROM {TABLE} WHERE run = %s AND at_byte >= %s"
)
_ROWS_AFTER = (
    f"SELECT string_agg(line, ''::bytea ORDER BY seq) FROM {TABLE} WHERE run = %s AND seq > %s"
)
_LAST = f"SELECT coalesce(max(seq), 0) FROM {TABLE} WHERE run = %s"


def where(url: str) -> str:
    """The database `url` names, for a message: its host and name, never its password."""
    from crw.journal.pg_query import where as named  # libpq's own parse, psycopg.pq alone

    return named(url)


def connect(url: str) -> Conn:
    """A connection with `synchronous_commit` on, whatever the server's default.

    Raises:
        OSError: the database cannot be reached.
    """
    import psycopg

    try:
        conn = psycopg.connect(url, options="-c synchronous_commit=on")
    except psycopg.Error as err:
        raise store_error(url, "connect to", err) from err
    return conn


def create_schema(conn: Conn) -> None:
    """Create the journal's tables where one is missing (one creator at a time); a
    database that has them all is left alone (a role with no right to create
    tables may use them)."""
    with conn.transaction():
        found = conn.execute(_PRESENT.encode(), (TABLES,)).fetchone()
        if found is not None and found[0] == len(TABLES) + 1:
            return
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
        conn.execute(SCHEMA.encode())  # a constant, several statements: no parameter
        conn.execute(SNAPSHOT_SCHEMA.encode())


def ensure_schema(url: str) -> None:
    """Connect to `url` and create the journal's table where it is missing.

    Raises:
        OSError: the database cannot be reached or the table made.
    """
    with connect(url) as conn:
        try:
            create_schema(conn)
        except Exception as err:
            raise store_error(url, "create the journal's table in", err) from err


class PostgresJournal:
    """The `JournalStore` of run `run` in the database at `url`; `path`, the run's
    `journal.jsonl`, names the journal in a damage's message."""

    def __init__(self, url: str, run: str, path: Path) -> None:
        self.url = url
        self.run = run
        self.path = path

    @property
    def location(self) -> str:
        return f"run {self.run} in the {where(self.url)}"

    @contextmanager
    def _reading(self) -> Iterator[Conn]:
        import psycopg

        conn = connect(self.url)
        try:
            with conn:
                yield conn
        except psycopg.errors.UndefinedTable:
            raise _Empty from None
        except psycopg.Error as err:
            raise store_error(self.url, "read the journal from", err) from err

    def _bytes(self, query: str, after: int) -> bytes:
        try:
            with self._reading() as conn:
                found = conn.execute(query.encode(), (self.run, after), binary=True).fetchone()
        except _Empty:
            return b""
        return bytes(found[0]) if found is not None and found[0] is not None else b""

    def read(self, after: int = 0) -> JournalRead:
        return decode(self._bytes(_ROWS_AFTER, after), self.path, after=after)

    def last_seq(self) -> int:
        try:
            with self._reading() as conn:
                found = conn.execute(_LAST.encode(), (self.run,)).fetchone()
        except _Empty:
            return 0
        return int(found[0]) if found is not None else 0

    def open_bytes(self) -> io.BufferedIOBase:
        return io.BytesIO(self.read_from(0))

    def size(self) -> int:
        try:
            with self._reading() as conn:
                found = conn.execute(SIZE.encode(), (self.run,)).fetchone()
        except _Empty:
            return 0
        return int(found[0]) if found is not None else 0

    def open_pieces(self) -> PieceReader:
        conn = connect(self.url)
        conn.autocommit = True  # a query a piece, no transaction held between
        return PieceReader(conn, self.run, lambda err: store_error(self.url, "read", err))

    def read_from(self, offset: int) -> bytes:
        return self._bytes(_BYTES_FROM, offset)

    def open_appender(self, known: JournalRead | None = None) -> PostgresAppender:
        conn = connect(self.url)
        try:
            try:
                create_schema(conn)
            except Exception as err:
                raise store_error(self.url, "create the journal's table in", err) from err
            read = known if known is not None else self.read()
            epoch = take(conn, self.url, self.run, read.last_seq)
            try:
                keep_run_files(conn, self.run, self.path.parent)
            except Exception as err:
                raise store_error(self.url, "keep the run's files in", err) from err
            conn.autocommit = True  # a group commit is one statement: its own transaction
        except BaseException:
            conn.close()
            raise
        return PostgresAppender(self, conn, read.last_seq, read.end, epoch)

    def snapshot_tail(self) -> tuple[bytes | None, int, bytes]:
        """The run's snapshot (its sealed bytes, None: none that ends at a row's end)
        and the journal's bytes after it (from `start`, 0 without one), in one query."""
        from crw.journal.pg_query import UndefinedTable, as_int, query

        try:  # psycopg's libpq wrapper alone: a command reading a run cold needs no more
            found = query(self.url, SNAPSHOT_AND_TAIL, [self.run], "read the journal from")
        except UndefinedTable:
            return None, 0, b""
        sealed, start, tail = found[0] if found else (None, None, None)
        if sealed is None:
            return None, 0, tail or b""
        return sealed, as_int(start) or 0, tail or b""

    def keep_snapshot(
        self, sealed: bytes, end: int, last_seq: int, summary: bytes | None = None
    ) -> bool:
        """Keep the run's snapshot and its summary in the database (unless one further
        on is there).

        Raises:
            OSError: the database failed.
        """
        from crw.journal.pg_query import UndefinedTable, query

        params = [self.run, str(last_seq), str(end), sealed, summary]
        try:  # as snapshot_tail: the status that read the run keeps it, psycopg.pq alone
            query(self.url, KEEP_SNAPSHOT, params, "keep the snapshot in")
        except UndefinedTable:
            return False
        return True

    @property
    def wake_file(self) -> None:
        return None

    def open_wake(self) -> PostgresWake:
        import psycopg

        conn = connect(self.url)
        try:
            conn.autocommit = True
            conn.execute(f"LISTEN {CHANNEL}".encode())
        except psycopg.Error as err:
            conn.close()
            raise store_error(self.url, "listen on", err) from err
        return PostgresWake(conn, self.run)

    def files(self) -> tuple[Path, ...]:
        return ()


class _Fenced(Exception):
    """The run's epoch is no longer this writer's: the transaction is rolled back."""


class _Empty(Exception):
    """The journal's table is not there yet: no run has written a row."""


class PostgresAppender:
    """The open journal of a run in PostgreSQL, for its one writer (one connection,
    one transaction a group)."""

    blocking = True

    def __init__(
        self,
        store: PostgresJournal,
        conn: Conn,
        last_seq: int,
        end: int,
        epoch: int,
    ) -> None:
        self._store = store
        self._conn = conn
        self.lease = lease_seconds()
        """Seconds the writer's hold lasts past its last commit or renewal."""
        self.epoch = epoch
        """The run's epoch this writer took: its commits count only while it stands."""
        self._fenced: OSError | None = None
        self.last_seq = last_seq
        """The seq of the last durable row."""
        self._end = end
        self._one = threading.Lock()
        """One transaction at a time on the connection: a renewal's thread waits
        for a group commit's, and the other way round."""

    def renew(self) -> None:
        """Renew the lease where this writer's epoch still stands (one transaction).

        Raises:
            OSError: the database failed (the lease stands as it was), or the
                writer is fenced (ESTALE): so is every later append.
        """
        import psycopg

        with self._one:
            if self._fenced is not None:
                raise self._fenced
            try:
                renewed = self._connection().execute(
                    RENEW.encode(), (self.lease, self._store.run, self.epoch)
                )
                if renewed.rowcount != 1:
                    raise _Fenced
            except _Fenced:
                raise self._fence() from None
            except psycopg.Error as err:
                raise store_error(self._store.url, "renew the run's lease in", err) from err

    def _fence(self) -> StoreError:
        """This writer's epoch is overtaken: it is fenced from now on."""
        self._fenced = StoreError(
            errno.ESTALE,
            f"run {self._store.run} was taken by another writer (this one's epoch "
            f"{self.epoch} is fenced): its rows were not written, and this process stops",
            "another process took the run and goes on with it",
        )
        return self._fenced

    def append(self, data: bytes, rows: int) -> None:
        """Insert the group's lines (one a row) in one statement, committed with
        `synchronous_commit` on: durable when this returns; none of them on failure.
        The transaction renews the writer's lease where its epoch still stands and
        changes nothing where another writer took the run (fenced: this and every
        later append raise), and notifies CHANNEL as it commits.

        Raises:
            OSError: the transaction failed (the connection is made again next
                time), or the writer is fenced (ESTALE).
        """
        import psycopg

        if self._fenced is not None:
            raise self._fenced
        run = self._store.run
        lines = [line + b"\n" for line in data.split(b"\n")[:-1]]
        if len(lines) != rows:
            raise ValueError(f"a group of {rows} rows holds {len(lines)} lines")
        seqs = list(range(self.last_seq + 1, self.last_seq + 1 + rows))
        offsets, at = [], self._end
        for line in lines:
            offsets.append(at)
            at += len(line)
        group = {
            **{"lease": self.lease, "run": run, "epoch": self.epoch, "channel": CHANNEL},
            **{"seqs": seqs, "offsets": offsets, "lines": lines, "payload": f"{run} {seqs[-1]}"},
        }
        try:
            with self._one:
                if self._connection().execute(COMMIT_GROUP.encode(), group).fetchone() is None:
                    raise _Fenced
        except _Fenced:
            raise self._fence() from None
        except psycopg.Error as err:
            raise store_error(self._store.url, "write the journal to", err) from err
        self.last_seq += rows
        self._end = at

    def _connection(self) -> Conn:
        """The writer's connection (in autocommit: a statement is a transaction),
        made again when the last one failed."""
        if self._conn.closed:
            self._conn = connect(self._store.url)
            self._conn.autocommit = True
        return self._conn

    def close(self) -> None:
        self._conn.close()
