"""A run's own files kept in the database beside its rows, so that another machine
can make the run's directory and resume it once its writer's lease lapsed.

They are the files the start wrote before the run's first row and never changes
after: `run.json`, a rerun's `reused.json` and the copies of its file inputs
(`inputs/NAME`). Every writer that takes the run keeps them (`keep_run_files`, the
files already there are left as they are); the step bus, the calls' packets and
workspaces, the locks and the log are the machine's that runs the run, and are
not kept.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import psycopg

    Conn = psycopg.Connection[tuple[Any, ...]]

FILES = "crw_run_files"
RUN_JSON = "run.json"
KEPT = (RUN_JSON, "reused.json")
"""The run's files kept by name; besides them every file of `inputs/`."""
KEEP = (
    f"INSERT INTO {FILES} (run, name, data) SELECT %s, n, d "
    "FROM unnest(%s::text[], %s::bytea[]) AS t(n, d) ON CONFLICT (run, name) DO NOTHING"
)
_FILES = f"SELECT name, data FROM {FILES} WHERE run = %s"
_NAMES = f"SELECT name FROM {FILES} WHERE run = %s"


def run_files(root: Path, skip: frozenset[str] = frozenset()) -> dict[str, bytes]:
    """The files of the run directory `root` that the database keeps, by their path
    in it (`inputs/NAME`), those named in `skip` left unread.

    Raises:
        OSError: one cannot be read.
    """
    inputs = root / "inputs"
    names = (
        [*KEPT, *(f"inputs/{p.name}" for p in sorted(inputs.iterdir()))]
        if inputs.is_dir()
        else list(KEPT)
    )
    found: dict[str, bytes] = {}
    for name in names:
        if name in skip:
            continue
        try:
            found[name] = (root / name).read_bytes()
        except FileNotFoundError:
            continue
    return found


def keep_run_files(conn: Conn, run: str, root: Path) -> None:
    """Keep the files of run `run`'s directory `root` in the database, in one
    transaction: those it lacks (the files never change once written).

    Raises:
        OSError: a file cannot be read.
        psycopg.Error: the database failed.
    """
    with conn.transaction():
        there = frozenset(str(name) for (name,) in conn.execute(_NAMES.encode(), (run,)))
        files = run_files(root, there)
        if files:
            conn.execute(KEEP.encode(), (run, list(files), list(files.values())))


def kept_files(conn: Conn, run: str) -> dict[str, bytes]:
    """The files the database keeps of run `run`, by their path in its directory
    (none: no writer took the run, or its table is not there yet).

    Raises:
        psycopg.Error: the database failed.
    """
    import psycopg

    try:
        with conn.transaction():
            found = conn.execute(_FILES.encode(), (run,)).fetchall()
    except psycopg.errors.UndefinedTable:
        return {}
    return {str(name): bytes(data) for name, data in found}
