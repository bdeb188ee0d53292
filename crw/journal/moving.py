"""Moving a run's journal between stores: its lines checked, then copied verbatim.

`checked_lines` splits a journal's bytes into its lines after checking every
line's checksum (`decode`), so a damaged line is refused by its seq before
anything is copied. `copy_to_postgres` inserts the lines of a run into the
database in one transaction (`synchronous_commit` on: durable once it returns);
`drop_from_postgres` removes them once the run's journal lives elsewhere.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from crw.errors import RefusedError
from crw.journal.log import JournalCorruptError, decode
from crw.journal.pg_run_files import FILES, KEEP
from crw.journal.pg_statements import RUNS, SNAPSHOTS, TABLE
from crw.journal.postgres import connect, create_schema, where

_INSERT = (
    f"INSERT INTO {TABLE} (run, seq, at_byte, line) "
    "SELECT %s, s, a, l FROM unnest(%s::bigint[], %s::bigint[], %s::bytea[]) AS t(s, a, l)"
)
_ALL = f"SELECT string_agg(line, ''::bytea ORDER BY seq) FROM {TABLE} WHERE run = %s"


@dataclass(frozen=True)
class Lines:
    """A journal's whole lines (seq n is `lines[n - 1]`), and the torn tail dropped."""

    lines: list[bytes]
    torn: str | None

    @property
    def data(self) -> bytes:
        return b"".join(self.lines)

    def offsets(self) -> list[int]:
        at, offsets = 0, []
        for line in self.lines:
            offsets.append(at)
            at += len(line)
        return offsets


def checked_lines(data: bytes, path: Path, run: str) -> Lines:
    """The lines of run `run`'s journal bytes `data`, each one's checksum checked.

    Raises:
        RefusedError: a line is damaged (named by its seq) or the seqs are not 1, 2, ...
    """
    try:
        read = decode(data, path)
    except JournalCorruptError as err:
        seq = data.count(b"\n", 0, err.offset) + 1  # the damaged line's: one line a row
        raise RefusedError(
            f"run {run}'s journal is damaged at seq {seq} (byte {err.offset}: {err.reason}); "
            "nothing was moved: restore the journal from a backup or repair that line, "
            "then move it again"
        ) from err
    lines = [line + b"\n" for line in data[: read.end].split(b"\n")[:-1]]
    seqs = [row["seq"] for row in read.rows]
    if seqs != list(range(1, len(lines) + 1)):
        raise RefusedError(
            f"run {run}'s journal does not hold one line a row from seq 1 on; nothing was moved"
        )
    return Lines(lines, read.torn.message if read.torn is not None else None)


def copy_to_postgres(
    url: str, run: str, lines: Lines, files: dict[str, bytes] | None = None
) -> None:
    """Insert the run's lines into the database at `url`, with the run's `files`
    (`crw.journal.pg_run_files`: run.json as it will name the database), in one
    transaction, and check that it holds the lines byte for byte. Rows of the run
    already there are refused, unless they are these very lines (a move that
    stopped before run.json named the database: it goes on).

    Raises:
        OSError: the database failed.
        RefusedError: the database holds other rows of the run.
    """
    import psycopg

    with connect(url) as conn:
        try:
            create_schema(conn)
            with conn.transaction():
                conn.execute(f"LOCK TABLE {TABLE} IN SHARE ROW EXCLUSIVE MODE".encode())
                found = conn.execute(_ALL.encode(), (run,)).fetchone()
                there = bytes(found[0]) if found is not None and found[0] is not None else b""
                if there and there != lines.data:
                    raise RefusedError(
                        f"the {where(url)} already holds other rows of run {run}; nothing was "
                        "moved: remove them (DELETE FROM crw_journal WHERE run = ...) if they "
                        "are stale, or move the run to another database"
                    )
                if not there:
                    seqs = list(range(1, len(lines.lines) + 1))
                    conn.execute(_INSERT.encode(), (run, seqs, lines.offsets(), lines.lines))
                if files:
                    conn.execute(KEEP.encode(), (run, list(files), list(files.values())))
            found = conn.execute(_ALL.encode(), (run,)).fetchone()
        except psycopg.Error as err:
            raise OSError(f"could not copy the rows to the {where(url)}: {err}") from err
    copied = bytes(found[0]) if found is not None and found[0] is not None else b""
    if copied != lines.data:
        raise RefusedError(f"the {where(url)} does not hold run {run}'s rows as copied")


def drop_from_postgres(url: str, run: str, epoch: int) -> None:
    """Remove run `run`'s rows, lease and snapshot from the database, where the
    epoch is still `epoch` (the mover's: no writer took the run meanwhile).

    Raises:
        OSError: the database failed.
    """
    import psycopg

    with connect(url) as conn:
        try:
            with conn.transaction():
                gone = conn.execute(
                    f"DELETE FROM {RUNS} WHERE run = %s AND epoch = %s".encode(), (run, epoch)
                )
                if gone.rowcount == 1:
                    conn.execute(f"DELETE FROM {TABLE} WHERE run = %s".encode(), (run,))
                    conn.execute(f"DELETE FROM {FILES} WHERE run = %s".encode(), (run,))
                    conn.execute(f"DELETE FROM {SNAPSHOTS} WHERE run = %s".encode(), (run,))
        except psycopg.Error as err:
            raise OSError(f"could not remove the rows from the {where(url)}: {err}") from err
