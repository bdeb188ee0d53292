"""The runs a PostgreSQL database keeps journals of, for `crw flow list`, in one
query: each run with rows, the machine its writer last ran on and its lease
(`crw_runs`), its replay snapshot (`crw_snapshots`, where it ends at its row's
end) and its rows after the snapshot (all of them without one), so list folds
each run's tail as it does a file run's, and no run's journal is read whole; an
ended run brings its summary (`crw.journal.run_summary`), not its snapshot.

The runs are found by a skip over the journal's key (one index probe a run, not a
scan of every row); a run whose rows after its snapshot are more than `tail_max`
bytes comes without them (`tail` None): list reads it as `status` does.
"""

from __future__ import annotations

from dataclasses import dataclass

from crw.journal.pg_lease import HOLDER, Lease, lease_of
from crw.journal.pg_query import UndefinedTable, as_bool, as_int, as_text, query
from crw.journal.pg_run_files import FILES, RUN_JSON
from crw.journal.pg_statements import RUNS, SNAPSHOTS, TABLE
from crw.journal.postgres import connect, where
from crw.journal.store import StoreError

_RUNS = f"""
WITH RECURSIVE ids(run) AS (
    (SELECT run FROM {TABLE} ORDER BY run LIMIT 1)
    UNION ALL
    SELECT (SELECT j.run FROM {TABLE} AS j WHERE j.run > ids.run ORDER BY j.run LIMIT 1)
    FROM ids WHERE ids.run IS NOT NULL
)
SELECT ids.run, r.machine,
       to_char(r.lease_until AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
       coalesce(r.lease_until > now(), false),
       last.seq,
       CASE WHEN s.summary IS NULL OR last.seq > s.last_seq THEN s.snapshot END,
       s.end_byte,
       CASE WHEN last.seq = s.last_seq THEN s.summary END,
       (SELECT CASE WHEN coalesce(sum(octet_length(t.line)), 0) <= $1::bigint
                    THEN coalesce(string_agg(t.line, ''::bytea ORDER BY t.seq), ''::bytea) END
        FROM {TABLE} AS t WHERE t.run = ids.run AND t.seq > coalesce(s.last_seq, 0))
FROM ids
CROSS JOIN LATERAL (SELECT max(m.seq) AS seq FROM {TABLE} AS m WHERE m.run = ids.run) AS last
LEFT JOIN {RUNS} AS r ON r.run = ids.run
LEFT JOIN ({SNAPSHOTS} AS s JOIN {TABLE} AS e
           ON e.run = s.run AND e.seq = s.last_seq
           AND e.at_byte + octet_length(e.line) = s.end_byte)
ON s.run = ids.run
WHERE ids.run IS NOT NULL
ORDER BY ids.run DESC
"""
"""Every run: an ended run whose summary is kept and after whose snapshot no row
came brings its summary and not its snapshot (`crw.journal.run_summary`: a
snapshot holds every call, the summary their count)."""


@dataclass(frozen=True)
class DatabaseRun:
    """A run with rows in the database: its last seq, the machine of the writer that
    took it last (None: none has since it was imported) and that writer's lease;
    its snapshot's sealed bytes and end (None: none it can be read from) and the
    journal's bytes after it (None: more than list reads); `summary`, an ended
    run's summary, where no row came after its snapshot (then no snapshot)."""

    run: str
    machine: str | None
    lease_until: str | None
    held: bool
    last_seq: int
    snapshot: bytes | None = None
    snapshot_end: int = 0
    tail: bytes | None = None
    summary: bytes | None = None


def database_runs(url: str, tail_max: int = 1 << 20) -> list[DatabaseRun]:
    """The runs with rows in the database at `url`, by id, newest first (a run id
    carries its start time); none when no run wrote there yet. Read through
    psycopg's libpq wrapper alone (`crw.journal.pg_query`).

    Raises:
        OSError: the database cannot be reached or read.
    """
    try:
        found = query(url, _RUNS, [str(tail_max)], "read the runs of")
    except UndefinedTable:
        return []
    return [
        DatabaseRun(
            as_text(run) or "",
            as_text(machine),
            as_text(until),
            as_bool(held),
            as_int(last) or 0,
            snapshot,
            as_int(end) or 0,
            tail,
            summary,
        )
        for run, machine, until, held, last, snapshot, end, summary, tail in found
    ]


_ONE = f"""
SELECT EXISTS (SELECT 1 FROM {TABLE} WHERE run = %(run)s),
       (SELECT data FROM {FILES} WHERE run = %(run)s AND name = %(name)s)
"""


@dataclass(frozen=True)
class StoredRun:
    """A run of the database, for a machine that has no directory of it: the
    run.json its start wrote (None: no writer kept it, as for a run imported and
    not resumed since) and the lease of the writer that took it last (None: none)."""

    run_json: bytes | None
    lease: Lease | None


def stored_run(url: str, run: str) -> StoredRun | None:
    """Run `run` of the database at `url` (None: it has no row there).

    Raises:
        OSError: the database cannot be reached or read.
    """
    import errno

    import psycopg

    with connect(url) as conn:
        try:
            found = conn.execute(_ONE.encode(), {"run": run, "name": RUN_JSON}).fetchone()
            holder = conn.execute(HOLDER.encode(), (run,)).fetchone()
        except psycopg.errors.UndefinedTable:
            return None
        except psycopg.Error as err:
            raise StoreError(
                errno.EIO, f"could not read run {run} in the {where(url)}: {err}", "check it"
            ) from err
    if found is None or not found[0]:
        return None
    return StoredRun(None if found[1] is None else bytes(found[1]), lease_of(holder))
