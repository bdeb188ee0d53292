"""`crw flow import RUN --db URL` and `crw flow export RUN [--to FILE]`: move a
run's journal between its file and a PostgreSQL database, or copy it to a file.

A move holds the run's start, launch and run locks (each without waiting): no
process holds the run, none is being launched, no start is under way. Its order is
intent before effect, with run.json's atomic rename as the one point the move
happens: (1) the rows are copied, verbatim, each line's checksum checked first,
into the new store and made durable there (and read back: they must be the same
bytes); (2) run.json is rewritten to name the new store; (3) only then is the old
copy removed (the journal file emptied, the database's rows deleted). A crash
before (2) leaves the run in its old store, whole, and a copy the next move of the
same rows takes as done; a crash after it leaves the run in its new store, whole,
and a stale copy no reader looks at. Never is run.json naming a store that lacks
a row.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import ParamSpec, TypeVar

from crw.cli.default_db import chosen_db
from crw.cli.output import emit
from crw.engine.run.locks import RunHeldError, holder_pid, launch_lock, run_lock, start_lock
from crw.engine.run.rundir import RunDir, find_run, resolve_state
from crw.engine.run.runspec import read_run_spec, run_spec_bytes, write_run_spec
from crw.errors import InputError, RefusedError
from crw.journal.log import JournalRead
from crw.journal.moving import Lines, checked_lines
from crw.journal.pg_run_files import RUN_JSON, run_files
from crw.journal.stores import check_db_url, forget_store, journal_db_ready, store_at

P = ParamSpec("P")
T = TypeVar("T")


def import_command(run: str, *, db: str | None, state: str | None, json: bool) -> int:
    """Move RUN's journal from its file into the database `db` (else $CRW_DB, else
    the state's default)."""
    state_dir = resolve_state(state, os.environ, Path.cwd())
    url = chosen_db(db, state_dir, os.environ)
    if not url:
        raise InputError(
            "crw flow import needs a database: give --db URL, set CRW_DB, or record one "
            "with crw flow init --db URL"
        )
    check_db_url(url)
    run_dir = find_run(state_dir, run)
    with _held(run_dir):
        spec = read_run_spec(run_dir.run_json)
        if spec.journal_db is not None:
            raise RefusedError(
                f"run {run_dir.id}'s journal is kept in a database already; move it back "
                f"first (crw flow export {run_dir.id}), then import it"
            )
        lines = checked_lines(
            _durably(store_at(run_dir.journal).read_from, 0), run_dir.journal, run_dir.id
        )
        journal_db_ready(url)
        from crw.journal.moving import copy_to_postgres

        moved = spec.model_copy(update={"journal_db": url})
        files = _durably(run_files, run_dir.root) | {RUN_JSON: run_spec_bytes(moved)}
        _durably(copy_to_postgres, url, run_dir.id, lines, files)  # (1) rows and files, durable
        write_run_spec(run_dir.run_json, moved)  # (2)
        forget_store(run_dir.journal)
        _durably(_write_file, run_dir.journal, b"")  # (3) the file's copy goes
    from crw.journal.postgres import where

    return _said(json, run_dir, lines, f"moved to the {where(url)}")


def export_command(run: str, *, to: str | None, state: str | None, json: bool) -> int:
    """Move RUN's journal from its database to its file; with `to`, copy it to a file."""
    run_dir = find_run(resolve_state(state, os.environ, Path.cwd()), run)
    if to is not None:
        return _copy_to(run_dir, Path(to), json)
    with _held(run_dir):
        spec = read_run_spec(run_dir.run_json)
        if spec.journal_db is None:
            raise RefusedError(
                f"run {run_dir.id}'s journal is its file already ({run_dir.journal}); "
                f"copy it with --to FILE, or move it into a database with crw flow import"
            )
        store = store_at(run_dir.journal)
        # Take the run as its writer would: refused while another machine's lease
        # runs, and any writer left behind is fenced from here on.
        appender = _durably(store.open_appender, JournalRead([], 0, 0, None))  # no append
        try:
            lines = checked_lines(store.read_from(0), run_dir.journal, run_dir.id)
            _durably(_write_file, run_dir.journal, lines.data)  # (1) the rows, durable
            write_run_spec(run_dir.run_json, spec.model_copy(update={"journal_db": None}))  # (2)
            forget_store(run_dir.journal)
        finally:
            appender.close()
        from crw.journal.moving import drop_from_postgres

        epoch = int(getattr(appender, "epoch", 0))
        _durably(drop_from_postgres, spec.journal_db, run_dir.id, epoch)  # (3)
    return _said(json, run_dir, lines, f"moved to its file {run_dir.journal}")


def _copy_to(run_dir: RunDir, to: Path, json: bool) -> int:
    """Copy the run's journal, checked, to the new file `to`; the run is unchanged
    (it may be live: the copy holds its whole batches at the moment it was read)."""
    if to.exists():
        raise InputError(f"--to {to} exists already; give a new file")
    store = store_at(run_dir.journal)
    with _durably(store.open_bytes) as stream:
        data = stream.read()
    lines = checked_lines(data, run_dir.journal, run_dir.id)
    _durably(_write_file, to, lines.data, exclusive=True)
    return _said(json, run_dir, lines, f"copied to {to}", to=to)


def _said(json: bool, run_dir: RunDir, lines: Lines, where: str, *, to: Path | None = None) -> int:
    rows, torn = len(lines.lines), lines.torn
    human = f"run {run_dir.id}: {rows} rows {where}"
    if torn is not None:
        human += f"\n{torn}"
    payload = {"run": run_dir.id, "rows": rows, "bytes": len(lines.data), "torn": torn}
    emit(json, payload | ({"to": str(to)} if to is not None else {}), human)
    return 0


@contextlib.contextmanager
def _held(run: RunDir) -> Iterator[None]:
    """Hold the run's start, launch and run locks, or refuse: a process holds it."""
    with contextlib.ExitStack() as stack:
        for take, path in (
            (start_lock, run.start_lock),
            (launch_lock, run.root / "launch.lock"),
            (run_lock, run.run_lock),
        ):
            try:
                stack.enter_context(take(run))
            except RunHeldError:
                pid = holder_pid(path)
                by = f" (pid {pid})" if pid is not None else ""
                raise RefusedError(
                    f"run {run.id} is live: a process holds its {path.name}{by}; nothing was "
                    f"moved: pause it (crw flow pause {run.id}) or let it end, then move it"
                ) from None
        if not run.run_json.is_file():
            raise RefusedError(f"run {run.id} has no run.json: a start is writing it")
        yield


def _durably(step: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """`step`, its OSError (a disk's, a database's) refused in one line."""
    try:
        return step(*args, **kwargs)
    except OSError as err:
        fix = getattr(err, "fix", "check the disk and the database")
        raise RefusedError(f"{err.strerror or err}; {fix}, then move the run again") from err


def _write_file(path: Path, data: bytes, *, exclusive: bool = False) -> None:
    """Write `path` whole and durably: a temporary file beside it, fsync, rename
    (with `exclusive`, a link that refuses an existing file), fsync the directory."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        if exclusive:
            os.link(tmp, path)
        else:
            os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    directory = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
