"""A run's journal read from PostgreSQL a piece at a time, as a file is read.

The run process's exit replays its journal a piece at a time
(`crw.journal.streamed`), so the rows and bytes held at once stay bounded by the
piece. Read from the database in one query, the journal's bytes were held whole,
and more than once (the server's result, psycopg's copy, the stream over it):
a 10,000-call run's exit held some 90 MB more than a file run's. Each piece
here is its own query: the lines that start in the next `size` bytes, found by
the journal's `(run, at_byte)` index, so a piece holds a piece's bytes (and at
least one line, however long).
"""

from __future__ import annotations

import io
from typing import TYPE_CHECKING, Any

from crw.journal.pg_statements import TABLE

if TYPE_CHECKING:
    import psycopg

    Conn = psycopg.Connection[tuple[Any, ...]]

_PIECE = (
    f"SELECT string_agg(line, ''::bytea ORDER BY seq) FROM {TABLE} "
    "WHERE run = %s AND at_byte >= %s AND at_byte < %s"
)
"""The lines that start in a range of the journal's bytes: they follow on, since
the rows' offsets are their lines' in the journal's bytes."""
SIZE = f"SELECT at_byte + octet_length(line) FROM {TABLE} WHERE run = %s ORDER BY seq DESC LIMIT 1"
"""Where the journal's last line ends: its size (no row: none)."""
_ALL = 1 << 62


class PieceReader(io.BufferedIOBase):
    """The journal's bytes from its start, a query a `read(size)`: the lines that
    start in the next `size` bytes (at least one, so more than `size` when a line
    is longer); b"" at its end. `fail` makes psycopg's error the store's OSError."""

    def __init__(self, conn: Conn, run: str, fail: Any) -> None:
        self._conn = conn
        self._run = run
        self._fail = fail
        self._offset = 0

    def readable(self) -> bool:
        return True

    def read(self, size: int | None = -1) -> bytes:
        import psycopg

        stop = _ALL if size is None or size < 0 else self._offset + max(size, 1)
        try:
            found = self._conn.execute(
                _PIECE.encode(), (self._run, self._offset, stop), binary=True
            ).fetchone()
        except psycopg.errors.UndefinedTable:
            return b""
        except psycopg.Error as err:
            raise self._fail(err) from err
        data = bytes(found[0]) if found is not None and found[0] is not None else b""
        self._offset += len(data)
        return data

    def close(self) -> None:
        if not self.closed:
            self._conn.close()
        super().close()
