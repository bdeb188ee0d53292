"""What `crw flow rm` and `gc` do for a run whose journal is in a database.

Before anything is removed, a run another machine's writer holds (its lease
live) is refused: it goes on there. After the run's directory is renamed out of
the way (the removal's intent, made durable), the run's rows, lease and kept
files are deleted in one transaction, and only then is the directory deleted: a
crash between leaves the renamed directory, whose run.json names the rows, and
the next `gc` deletes them before the directory. A run another machine took last
(it was resumed there) keeps its rows: this machine's directory was a stale copy.
"""

from __future__ import annotations

import json
from pathlib import Path

from crw.engine.run.rundir import RunDir
from crw.errors import RefusedError


def journal_db(root: Path) -> tuple[str, str] | None:
    """The database and run id run.json in `root` names (None: a journal file, or no
    readable run.json)."""
    try:
        spec = json.loads((root / "run.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(spec, dict) or not isinstance(spec.get("journal_db"), str):
        return None
    return str(spec["journal_db"]), str(spec.get("id") or root.name)


def held_elsewhere(run: RunDir) -> str | None:
    """Why the run is not removed: another machine's writer holds its lease, or its
    database cannot be read; None when it may be removed."""
    found = journal_db(run.root)
    if found is None:
        return None
    from crw.journal.pg_lease import held_line, run_lease

    url, run_id = found
    try:
        lease = run_lease(url, run_id)
    except OSError as err:
        return f"{err.strerror}; run {run_id} is not removed: start the database, then again"
    if lease is None or not lease.held_elsewhere():
        return None
    return held_line(run_id, lease, verb="remove")


def remove_rows(root: Path) -> str | None:
    """Delete the rows of the run whose (renamed) directory is `root`, where its
    run.json names a database; where another machine took the run last, leave
    them and say so (the run went on there: this directory was a stale copy).

    Raises:
        RefusedError: the database failed, or another machine holds the run now
            (the directory stays, for the next gc).
    """
    found = journal_db(root)
    if found is None:
        return None
    from crw.journal.pg_remove import remove_run_rows

    url, run_id = found
    try:
        held = remove_run_rows(url, run_id)
    except OSError as err:
        raise RefusedError(
            f"{err.strerror}; run {run_id}'s directory was set aside as {root} and its rows "
            "stay: start the database, then crw flow gc removes both"
        ) from err
    if held is None:
        return None
    if held.live:
        raise RefusedError(
            f"run {run_id} was taken by machine {held.machine} meanwhile (lease until "
            f"{held.until}); its rows stay in the database and its directory here is set "
            f"aside as {root}"
        )
    return (
        f"its rows stay in the database: machine {held.machine} took the run last, remove it there"
    )


def last_row_at(run: RunDir) -> str | None:
    """The `at` of the last row of a run whose journal is in a database (None: a
    journal file, or no row)."""
    if journal_db(run.root) is None:
        return None
    from crw.journal.stores import store_at

    store = store_at(run.journal)
    try:
        last = store.last_seq()
        rows = store.read(after=max(last - 1, 0)).rows if last else []
    except OSError:
        return None
    at = rows[-1].get("at") if rows else None
    return at if isinstance(at, str) else None
