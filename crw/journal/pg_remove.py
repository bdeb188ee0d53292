"""Removing a run from the database: its rows, its `crw_runs` row, its kept
files and its replay snapshot, in one transaction, unless another machine's writer holds it now.

`crw flow rm` and `gc` call it once the run's directory is renamed out of the way
(the removal's intent, durable) and before that directory is deleted, so a crash
between the two leaves the renamed directory, whose run.json the next `gc` reads
to remove the rows it names.
"""

from __future__ import annotations

import errno

from crw.journal.pg_lease import Lease
from crw.journal.pg_machine import machine_id
from crw.journal.pg_run_files import FILES
from crw.journal.pg_statements import RUNS, SNAPSHOTS, TABLE
from crw.journal.postgres import connect, create_schema, where
from crw.journal.store import StoreError

_CLAIM = f"""
INSERT INTO {RUNS} (run, epoch, machine, lease_until) VALUES (%s, 0, %s, 'epoch')
ON CONFLICT (run) DO NOTHING
"""
"""The run's lease row taken by the removal, as insert-or-lock: a run no writer took
yet (imported, never resumed) has none to lock, so the removal inserts one (held by
no lease, deleted with the rest), and a writer taking the run meanwhile waits for
the removal's transaction (then finds the rows it read gone: `PostgresJournal.
open_appender` refuses) or is waited for (its lease then holds the run: refused).
Where the row is there, the removal's lock below waits as ever."""

_HOLDER = f"""
SELECT machine, to_char(lease_until AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
       lease_until > now(), greatest(extract(epoch FROM lease_until - now()), 0)
FROM {RUNS} WHERE run = %s AND machine <> %s FOR UPDATE
"""
"""The run's last writer where it is another machine's (locked: no writer takes
the run until the transaction ends)."""


def remove_run_rows(url: str, run: str) -> Lease | None:
    """Delete run `run`'s rows, lease and kept files in the database at `url`, in
    one transaction; where another machine's writer took the run last (its lease
    live or not: the run went on there), delete nothing and return its lease.

    Raises:
        OSError: the database cannot be reached or written.
    """
    import psycopg

    with connect(url) as conn:
        try:
            create_schema(conn)  # a database no writer of this crw wrote to yet
            with conn.transaction():
                conn.execute(_CLAIM.encode(), (run, machine_id()))
                held = conn.execute(_HOLDER.encode(), (run, machine_id())).fetchone()
                if held is not None:
                    return Lease(str(held[0]), str(held[1]), bool(held[2]), float(held[3]))
                for table in (TABLE, RUNS, FILES, SNAPSHOTS):
                    conn.execute(f"DELETE FROM {table} WHERE run = %s".encode(), (run,))
        except psycopg.Error as err:
            raise _not_removed(url, run, err) from err
    return None


_LEASE = f"""
SELECT machine, to_char(lease_until AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
       lease_until > now(), greatest(extract(epoch FROM lease_until - now()), 0)
FROM {RUNS} WHERE run = %s FOR UPDATE
"""
"""The run's last writer, whichever machine's (locked: a writer taking the run
meanwhile waits for the transaction, then finds its epoch gone: fenced)."""


def remove_unheld_run(url: str, run: str) -> Lease | int:
    """Delete run `run`'s rows, lease, kept files and snapshot in the database at
    `url`, in one transaction, unless a writer's lease holds it now (any machine's:
    no directory here says the run is this machine's); the live lease, else how
    many of the run's rows of every table went (0: the database keeps no such run).

    Raises:
        OSError: the database cannot be reached or written.
    """
    import psycopg

    with connect(url) as conn:
        try:
            create_schema(conn)
            with conn.transaction():
                claimed = conn.execute(_CLAIM.encode(), (run, machine_id())).rowcount
                held = conn.execute(_LEASE.encode(), (run,)).fetchone()
                if held is not None and held[2]:
                    return Lease(str(held[0]), str(held[1]), True, float(held[3]))
                return sum(
                    conn.execute(f"DELETE FROM {table} WHERE run = %s".encode(), (run,)).rowcount
                    for table in (TABLE, RUNS, FILES, SNAPSHOTS)
                ) - max(claimed, 0)  # the row the claim inserted is none of the run's
        except psycopg.Error as err:
            raise _not_removed(url, run, err) from err


def _not_removed(url: str, run: str, err: Exception) -> StoreError:
    """The database's failure to remove the run's rows (nothing went: one transaction)."""
    return StoreError(
        errno.EIO,
        f"could not remove run {run}'s rows from the {where(url)}: {err}",
        "start the database, then remove the run again",
    )
