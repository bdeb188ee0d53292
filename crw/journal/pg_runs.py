"""The runs a PostgreSQL database keeps journals of, for `crw flow list`: each
run with rows, the machine its writer last ran on and its lease (`crw_runs`)."""

from __future__ import annotations

from dataclasses import dataclass

from crw.journal.postgres import RUNS, TABLE, connect, where
from crw.journal.store import StoreError

_RUNS = f"""
SELECT j.run, r.machine, to_char(r.lease_until AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
       coalesce(r.lease_until > now(), false), j.last
FROM (SELECT run, max(seq) AS last FROM {TABLE} GROUP BY run) AS j
LEFT JOIN {RUNS} AS r USING (run)
ORDER BY j.run DESC
"""


@dataclass(frozen=True)
class DatabaseRun:
    """A run with rows in the database: its last seq, the machine of the writer that
    took it last (None: none has since it was imported) and that writer's lease."""

    run: str
    machine: str | None
    lease_until: str | None
    held: bool
    last_seq: int


def database_runs(url: str) -> list[DatabaseRun]:
    """The runs with rows in the database at `url`, by id, newest first (a run id
    carries its start time); none when no run wrote there yet.

    Raises:
        OSError: the database cannot be reached or read.
    """
    import errno

    import psycopg

    with connect(url) as conn:
        try:
            found = conn.execute(_RUNS.encode()).fetchall()
        except psycopg.errors.UndefinedTable:
            return []
        except psycopg.Error as err:
            raise StoreError(
                errno.EIO, f"could not read the runs of the {where(url)}: {err}", "check it"
            ) from err
    return [
        DatabaseRun(str(run), machine, until, bool(held), int(last))
        for run, machine, until, held, last in found
    ]
