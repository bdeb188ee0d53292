"""`crw flow rm RUN` and `gc --db URL` of a run only the database keeps: no
directory of it here (its machine died with its disk, or it ran elsewhere).

`rm RUN`, where RUN is not under the state directory, looks it up in the
database (`--db`, $CRW_DB, else the state's default, as `resume` does); `gc
--db URL` selects the database's runs that have no directory here and ended
before its date. A run a writer's lease holds now (any machine's: the run goes
on somewhere) is refused with the lease's one line; otherwise its rows, its
`crw_runs` row, its kept files and its replay snapshot go in one transaction
(`crw.journal.pg_remove.remove_unheld_run`). There is nothing else of it here to
remove: its directory, step bus and workspaces were its machine's.
"""

from __future__ import annotations

import datetime as _dt
import os
from pathlib import Path
from typing import Any

from crw.cli import when
from crw.engine.run.rundir import FLOW
from crw.errors import CrwError, InputError, RefusedError

REMOTE = ".database"
"""The place named for a run only the database keeps: its reads go to the store
kept for this path (`crw.journal.stores.keep_store`), never to a file."""


def rm_database_run(state: Path, run: str, db: str | None, missing: InputError) -> dict[str, Any]:
    """Remove run `run`, not under `state`, from the database (`db`, else $CRW_DB,
    else the state's default); what was removed.

    Raises:
        InputError: `missing` (no such run here), when no database is named or it
            keeps no such run.
        RefusedError: a writer's lease holds the run, or the database failed.
    """
    from crw.cli.default_db import chosen_db
    from crw.journal.stores import check_db_url

    url = chosen_db(db, state, os.environ)
    if url is None or os.sep in run:
        raise missing
    check_db_url(url)
    removed = _remove(url, run)
    if removed == 0:
        raise missing
    from crw.journal.postgres import where

    return {"run": run, "removed": True, "journal_db": where(url), "rows": removed}


def _remove(url: str, run: str) -> int:
    """Remove the run's rows; how many went.

    Raises:
        RefusedError: a writer's lease holds the run, or the database failed.
    """
    from crw.journal.pg_lease import held_line
    from crw.journal.pg_remove import remove_unheld_run

    try:
        removed = remove_unheld_run(url, run)
    except OSError as err:
        raise RefusedError(f"{err.strerror}; run {run} is not removed") from err
    if not isinstance(removed, int):
        raise RefusedError(held_line(run, removed, verb="remove"))
    return removed


def gc_database_runs(state: Path, url: str, before: _dt.datetime, dry_run: bool) -> dict[str, Any]:
    """Remove (on a dry run, list) the runs of the database at `url` that have no
    directory under `state` and ended before `before`: `removed` and `skipped`
    (held by a lease, or unreadable), as `gc`'s own.

    Raises:
        RefusedError: the database cannot be read.
    """
    from crw.journal.pg_runs import database_runs
    from crw.journal.stores import check_db_url

    check_db_url(url)
    try:
        runs = database_runs(url, tail_max=0)
    except OSError as err:
        raise RefusedError(f"{err.strerror}; gc --db removed none of its runs") from err
    flow = state / FLOW
    removed: list[dict[str, Any]] = []
    skipped: list[dict[str, Any]] = []
    for found in runs:
        if (flow / found.run).exists():
            continue  # a run with a directory here: gc judged it by its directory
        try:
            ended = _ended_before(state, url, found.run, before)
        except (CrwError, OSError) as err:
            skipped.append({"run": found.run, "reason": f"run {found.run} cannot be read: {err}"})
            continue
        if ended is None:
            continue
        if found.held:  # judged again in the removal's transaction
            skipped.append({"run": found.run, "reason": _held(url, found.run)})
            continue
        if not dry_run:
            try:
                _remove(url, found.run)
            except RefusedError as err:
                skipped.append({"run": found.run, "reason": str(err)})
                continue
        removed.append({"run": found.run} | ended | {"closed_line": None, "journal_db": True})
    return {"removed": removed, "skipped": skipped}


def _held(url: str, run: str) -> str:
    from crw.journal.pg_lease import held_line, run_lease

    lease = run_lease(url, run)
    return f"run {run} is held" if lease is None else held_line(run, lease, verb="remove")


def _ended_before(state: Path, url: str, run: str, before: _dt.datetime) -> dict[str, Any] | None:
    """The run's end ({ended_status, ended_at}) when it ended before `before`, read
    from the database (its snapshot and the rows after it)."""
    from crw.journal.postgres import PostgresJournal
    from crw.journal.snapshot import replay_journal
    from crw.journal.stores import forget_store, keep_store

    journal = state / REMOTE / run / "journal.jsonl"
    store = PostgresJournal(url, run, journal)
    keep_store(journal, store)
    try:
        status = replay_journal(journal)[0].ended_status
        last = store.last_seq() if status is not None else 0
        rows = store.read(after=max(last - 1, 0)).rows if last else []
    finally:
        forget_store(journal)
    at = rows[-1].get("at") if rows else None
    if status is None or not isinstance(at, str) or when.date("--ended-before", at) >= before:
        return None
    return {"ended_status": status, "ended_at": at}
