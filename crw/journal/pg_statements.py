"""The PostgreSQL store's statements beyond the journal's own table: the group
commit as one statement, and the runs' replay snapshots.

A group commit is one statement (`COMMIT_GROUP`) sent on a connection in
autocommit: one round trip, one transaction, the fence inside it. `crw_snapshots`
keeps each run's replay snapshot (`crw.journal.snapshot`'s bytes) and the row it
ends at, so `status` and `list` read a run as its snapshot and the rows after it,
from any machine, in one query.
"""

from __future__ import annotations

TABLE = "crw_journal"
RUNS = "crw_runs"
SNAPSHOTS = "crw_snapshots"
SNAPSHOT_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS {SNAPSHOTS} (
    run text PRIMARY KEY,
    last_seq bigint NOT NULL,
    end_byte bigint NOT NULL,
    snapshot bytea NOT NULL,
    summary bytea
);
ALTER TABLE {SNAPSHOTS} ADD COLUMN IF NOT EXISTS summary bytea;
"""
"""The snapshots' table: the state a run's rows up to `last_seq`, its first
`end_byte` bytes, replay to, as the snapshot file holds it, and an ended run's
summary of it (`crw.journal.run_summary`: what list reads). A table made before
the summary gets its column."""
COMMIT_GROUP = f"""
WITH fence AS (
    UPDATE {RUNS} SET lease_until = now() + make_interval(secs => %(lease)s)
    WHERE run = %(run)s AND epoch = %(epoch)s
    RETURNING run
), inserted AS (
    INSERT INTO {TABLE} (run, seq, at_byte, line)
    SELECT fence.run, t.s, t.a, t.l
    FROM fence, unnest(%(seqs)s::bigint[], %(offsets)s::bigint[], %(lines)s::bytea[]) AS t(s, a, l)
)
SELECT pg_notify(%(channel)s, %(payload)s) FROM fence
"""
"""A group commit, one statement and so one transaction: the lease renewed where
the writer's epoch stands (the row locked, so a writer taking the run meanwhile
waits, or is waited for and seen), the lines inserted only then, and the live
views notified at its commit. No row back: the run was taken, nothing changed."""
SNAPSHOT_AND_TAIL = f"""
SELECT s.snapshot, s.end_byte,
       (SELECT string_agg(j.line, ''::bytea ORDER BY j.seq) FROM {TABLE} AS j
        WHERE j.run = $1 AND j.seq > coalesce(s.last_seq, 0))
FROM (SELECT 1) AS one
LEFT JOIN ({SNAPSHOTS} AS s JOIN {TABLE} AS e
           ON e.run = s.run AND e.seq = s.last_seq
           AND e.at_byte + octet_length(e.line) = s.end_byte)
ON s.run = $1
"""
"""A run's snapshot and its rows after it, in one query (`$1` the run:
`crw.journal.pg_query`): the snapshot only where
the row it ends at is there and ends where it does (rows are inserted once and
never changed, so the bytes before are those it replayed), else none and every row."""
KEEP_SNAPSHOT = f"""
INSERT INTO {SNAPSHOTS} AS s (run, last_seq, end_byte, snapshot, summary)
VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (run) DO UPDATE
SET last_seq = excluded.last_seq, end_byte = excluded.end_byte, snapshot = excluded.snapshot,
    summary = excluded.summary
WHERE s.last_seq <= excluded.last_seq
"""
"""Keep a run's snapshot (and an ended run's summary), unless one further on is
there already (`$1`... run, last_seq, end_byte, snapshot, summary:
`crw.journal.pg_query`)."""
