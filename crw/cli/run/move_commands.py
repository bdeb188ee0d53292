"""The commands that move a run's journal between stores in the command tree:
`crw flow import` and `crw flow export` (`crw.cli.run.move` does the work)."""

from __future__ import annotations

from typing import Annotated

from cyclopts import Parameter

from crw.cli.params import Json, State


def import_(
    run: str,
    /,
    *,
    db: str | None = None,
    state: State = None,
    json: Json = False,
) -> int:
    """Move a run's journal from its file into a PostgreSQL database.

    Every line's checksum is checked first (a damaged line is refused by its seq,
    nothing moved); the rows are copied verbatim and made durable, then run.json
    names the database, then the file is emptied. A live run (a process holds it)
    is refused.

    Parameters
    ----------
    run
        The run id, or the path of its run directory.
    db
        The database: postgresql://USER@HOST/DATABASE (default: $CRW_DB, else
        the state's default from crw flow init --db).
    """
    from crw.cli.run.move import import_command

    return import_command(run, db=db, state=state, json=json)


def export(
    run: str,
    /,
    *,
    to: Annotated[str | None, Parameter(metavar="FILE")] = None,
    state: State = None,
    json: Json = False,
) -> int:
    """Move a run's journal from its database back to its file, or copy it to a file.

    Without --to: the rows are written to the run's journal.jsonl and made
    durable, then run.json names no database, then the rows are deleted from the
    database; a live run (a process holds it, or another machine's lease runs) is
    refused. Every line's checksum is checked first (a damaged line is refused by
    its seq).

    Parameters
    ----------
    run
        The run id, or the path of its run directory.
    to
        Copy the run's journal (from either store) to this new file instead, and
        change nothing: the whole batches it holds when read, a live run too.
    """
    from crw.cli.run.move import export_command

    return export_command(run, to=to, state=state, json=json)
