"""One writer per run: the take that raises a run's epoch, and the renewal of its
writer's lease (`crw.journal.postgres.PostgresAppender.renew`).

A process takes a run by raising its epoch in `crw_runs` when the lease lapsed or
this machine holds it; every group commit is conditional on that epoch
(`pg_statements.COMMIT_GROUP`), so a writer another took the run from commits
nothing. The take also checks that the rows its writer read are still there: a
removal (`crw.journal.pg_remove`) that deleted the run meanwhile leaves nothing to
write into.
"""

from __future__ import annotations

import errno
from typing import TYPE_CHECKING, Any

from crw.journal.pg_machine import lease_seconds, machine_id
from crw.journal.pg_query import where
from crw.journal.pg_statements import RUNS, TABLE
from crw.journal.store import StoreError

if TYPE_CHECKING:
    import psycopg

    Conn = psycopg.Connection[tuple[Any, ...]]

_TAKE = f"""
INSERT INTO {RUNS} AS r (run, epoch, machine, lease_until)
VALUES (%s, 1, %s, now() + make_interval(secs => %s))
ON CONFLICT (run) DO UPDATE
SET epoch = r.epoch + 1, machine = excluded.machine, lease_until = excluded.lease_until
WHERE r.lease_until < now() OR r.machine = excluded.machine
RETURNING epoch
"""
"""Take the run: raise its epoch, when its lease lapsed or this machine holds it."""
_HOLDER = f"SELECT machine, lease_until FROM {RUNS} WHERE run = %s"
_STILL_THERE = f"SELECT 1 FROM {TABLE} WHERE run = %s AND seq = %s"
"""The last row the taker read, still there once it took the run: a removal
(`crw.journal.pg_remove`, which locks or inserts the run's lease row first, so the
take waited for it) may have deleted the run meanwhile."""
RENEW = (
    f"UPDATE {RUNS} SET lease_until = now() + make_interval(secs => %s) "
    "WHERE run = %s AND epoch = %s"
)
"""A renewal while the writer commits nothing: no row when another writer took the run."""

_REACH = "check that the database is up and reachable at the URL run.json's journal_db names"


def store_error(url: str, what: str, err: Exception) -> StoreError:
    """`err` (psycopg's) as the OSError a journal's reader and writer know."""
    first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    return StoreError(errno.EIO, f"could not {what} the {where(url)}: {first}", _REACH)


class _Removed(Exception):
    """The run's rows went while a writer took it (its take rolled back)."""


def take(conn: Conn, url: str, run: str, last_seq: int) -> int:
    """Take run `run` for this writer, which read its rows to `last_seq`, on `conn` to
    the database at `url`: its new epoch.

    Raises:
        OSError: another machine holds the run's lease (EBUSY), the run was
            removed since it was read (ENOENT; not taken), or the database failed.
    """
    import psycopg

    machine = machine_id()
    try:
        with conn.transaction():
            taken = conn.execute(_TAKE.encode(), (run, machine, lease_seconds())).fetchone()
            holder = conn.execute(_HOLDER.encode(), (run,)).fetchone()
            kept = conn.execute(_STILL_THERE.encode(), (run, last_seq)).fetchone()
            if last_seq and kept is None:
                raise _Removed
    except _Removed:
        raise StoreError(
            errno.ENOENT,
            f"run {run} was removed from the {where(url)} (crw flow rm or gc) "
            "while it was taken; nothing was written to it",
            "it is gone: start its workflow again with crw flow start",
        ) from None
    except psycopg.Error as err:
        raise store_error(url, "take the run in", err) from err
    if taken is None:
        held_by, until = holder if holder is not None else ("?", "?")
        raise StoreError(
            errno.EBUSY,
            f"run {run} is held by machine {held_by} until {until} (its writer's lease)",
            f"resume it on {held_by}, or here once its lease has lapsed",
        )
    return int(taken[0])
