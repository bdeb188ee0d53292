"""Who holds a run of the database: the machine of its last writer and its lease,
read before a command takes the run (a resume on another machine).

A lease is live while the server's clock has not passed its end: the writer's
machine renews it (`crw.journal.postgres.PostgresAppender.renew`), and a machine
that died lets it lapse. The answer is read on the server's clock, never this
machine's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from crw.journal.pg_machine import machine_id
from crw.journal.pg_statements import RUNS
from crw.journal.postgres import connect, where
from crw.journal.store import StoreError

HOLDER = f"""
SELECT machine, to_char(lease_until AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
       lease_until > now(), greatest(extract(epoch FROM lease_until - now()), 0)
FROM {RUNS} WHERE run = %s
"""


@dataclass(frozen=True)
class Lease:
    """The writer that took a run last: its machine, its lease's end (UTC, ISO 8601),
    whether it is live and the seconds left of it."""

    machine: str
    until: str
    live: bool
    left: float

    def held_elsewhere(self) -> bool:
        """Whether another machine's writer holds the run now (this one may not take it)."""
        return self.live and self.machine != machine_id()


def run_lease(url: str, run: str) -> Lease | None:
    """The lease of run `run` in the database at `url` (None: no writer took it).

    Raises:
        OSError: the database cannot be reached or read.
    """
    import errno

    import psycopg

    with connect(url) as conn:
        try:
            found = conn.execute(HOLDER.encode(), (run,)).fetchone()
        except psycopg.errors.UndefinedTable:
            return None
        except psycopg.Error as err:
            raise StoreError(
                errno.EIO,
                f"could not read run {run}'s lease in the {where(url)}: {err}",
                "check that the database is up and reachable at its URL",
            ) from err
    return lease_of(found)


def lease_of(found: tuple[Any, ...] | None) -> Lease | None:
    """The lease HOLDER's row holds (None: no row, no writer took the run)."""
    if found is None:
        return None
    machine, until, live, left = found
    return Lease(str(machine), str(until), bool(live), float(left))


def held_line(run: str, lease: Lease, *, verb: str = "resume") -> str:
    """The refusal of a command that would take (`verb`: resume, remove) a run
    another machine holds: which machine, when its lease lapses, and what to do."""
    done = "" if verb == "resume" else f"it is not {verb}d: "
    return (
        f"run {run} is held by machine {lease.machine} until {lease.until} "
        f"(its writer's lease, {lease.left:.0f} s left); {done}{verb} it on {lease.machine}, "
        f"or here once that lease has lapsed (its machine stopped renewing it)"
    )
