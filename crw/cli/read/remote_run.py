"""A run of the database this machine has no directory of, for `status` and `show`.

A run whose journal is in PostgreSQL is read from any machine: its rows, its
snapshot and the run.json its start wrote are in the database (`crw.journal.
pg_run_files`); its directory (step bus, packets, workspaces, locks, log) is on
the machine that runs it. A run id that is not under the state directory is
looked up in the database (`$CRW_DB`, else the state directory's default, `crw
flow init --db`), and read there, as `list --db` reads it, without making its
directory (`crw flow resume` makes it, to run it here). It is live while another
machine's writer holds its lease.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from crw.engine.run.rundir import RunDir, find_run
from crw.errors import InputError, RefusedError
from crw.journal.stores import check_db_url, keep_store, open_store

if TYPE_CHECKING:
    from crw.journal.pg_lease import Lease


@dataclass(frozen=True)
class Elsewhere:
    """A run read from the database at `url`: `spec`, its run.json there ({}: none
    kept), and the lease of its last writer (None: none took it)."""

    run: str
    url: str
    spec: dict[str, Any]
    lease: Lease | None

    def live(self) -> bool:
        """Whether another machine's writer held the run when it was looked up."""
        return self.lease is not None and self.lease.held_elsewhere()

    def live_now(self) -> bool:
        """Whether another machine's writer holds the run now (its lease read again;
        a database that cannot be read holds none: a follower stops)."""
        from crw.journal.pg_lease import run_lease

        try:
            lease = run_lease(self.url, self.run)
        except OSError:
            return False
        return lease is not None and lease.held_elsewhere()

    def to_json(self) -> dict[str, Any]:
        """{machine, lease_until, held}: where it last ran and that writer's lease."""
        lease = self.lease
        return {
            "machine": lease.machine if lease is not None else None,
            "lease_until": lease.until if lease is not None else None,
            "held": lease is not None and lease.live,
        }


def find_here_or_elsewhere(state: Path, run: str) -> tuple[RunDir, Elsewhere | None]:
    """The run's directory under `state` (and None); else, for a run only the
    database keeps, its place under `state` (not made) and the run as the database
    holds it, its journal's store known for the process.

    Raises:
        InputError: no such run here nor in the database.
        RefusedError: the run is not here and the database cannot be read.
    """
    try:
        return find_run(state, run), None
    except InputError as missing:
        from crw.cli.default_db import chosen_db

        url = chosen_db(None, state, os.environ)
        if url is None or os.sep in run or run in (".", ".."):
            raise
        not_here = missing
    check_db_url(url)
    from crw.journal.pg_runs import stored_run
    from crw.journal.postgres import where

    try:
        found = stored_run(url, run)
    except OSError as err:
        raise RefusedError(
            f"run {run} is not under {state / 'flow'} and the {where(url)} could not be "
            f"read ({err.strerror or err}); start the database or fix CRW_DB"
        ) from err
    if found is None:
        raise not_here
    run_dir = RunDir.of(state, run)
    keep_store(run_dir.journal, open_store(url, run, run_dir.journal))
    try:
        spec = json.loads(found.run_json) if found.run_json is not None else {}
    except ValueError:
        spec = {}
    return run_dir, Elsewhere(run, url, spec if isinstance(spec, dict) else {}, found.lease)
