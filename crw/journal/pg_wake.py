"""A live view's wake on a run of the database: a LISTEN on the channel every
group commit notifies in its transaction (`RUN SEQ`); a hint only, the view reads
the rows after its last seq."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import psycopg

    Conn = psycopg.Connection[tuple[Any, ...]]


class PostgresWake:
    """A LISTEN on CHANNEL: readable when a group commit of some run notified."""

    def __init__(self, conn: Conn, run: str) -> None:
        self._conn = conn
        self._prefix = f"{run} "

    def fileno(self) -> int:
        return self._conn.fileno()

    def woken(self) -> bool:
        import psycopg

        try:
            heard = [n.payload for n in self._conn.notifies(timeout=0)]
        except psycopg.Error:
            return True  # the connection is gone: the caller reads, as after a lost event
        return any(payload.startswith(self._prefix) for payload in heard)

    def close(self) -> None:
        self._conn.close()
