"""A run of the database resumed on a machine that has no directory of it.

The run's directory is its machine's (its step bus, the calls' packets and
workspaces, its locks and log), but the database keeps, beside its rows, the files
its start wrote (`crw.journal.pg_run_files`): run.json, a rerun's reused.json and
the copies of its file inputs. `crw flow resume RUN` on a machine where RUN is not
under the state directory looks it up in the database (`--db`, $CRW_DB, else the
state directory's default, `crw flow init --db`) and makes its directory from
those files, after every check that can refuse: another machine's live lease, a
session run (its owner's bus is on its machine), a recorded TMPDIR this machine
lacks, a workflow file this machine lacks or holds changed. Nothing is made on a
refusal. The directory is made beside its place (`.resuming-RUN-…`), run.json
naming the database as this machine reaches it, and renamed into place once
whole: no command meets half a run, and a crash leaves only that directory.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from crw.engine.run.launch_check import changed_workflow
from crw.engine.run.locks import RunHeldError, run_lock
from crw.engine.run.rundir import RunDir
from crw.engine.run.runspec import RunSpec, write_run_spec
from crw.engine.run.tmploc import recorded_problem
from crw.errors import CrwError, RefusedError
from crw.private import fsync_dir, write_atomic

MAKING_PREFIX = ".resuming-"
"""A run's directory made from the database before it is renamed into place, its
run lock held meanwhile; a crash leaves it, which `crw flow gc` deletes (no
command reads it)."""


def check_lease(spec: RunSpec) -> None:
    """Refuse to take a run whose journal is in a database while another machine's
    writer holds its lease (naming the machine and when its lease lapses).

    Raises:
        RunHeldError: another machine holds the run.
        RefusedError: the database cannot be read.
    """
    if spec.journal_db is None:
        return
    from crw.journal.pg_lease import held_line, run_lease

    try:
        lease = run_lease(spec.journal_db, spec.id)
    except OSError as err:
        raise RefusedError(f"{err.strerror}; start the database, then resume again") from err
    if lease is not None and lease.held_elsewhere():
        raise RunHeldError(held_line(spec.id, lease))


def run_from_database(state: Path, run: str, url: str) -> RunDir | None:
    """Make run `run`'s directory under `state` from the files the database at
    `url` keeps of it; None when it keeps none (no such run there).

    Raises:
        RunHeldError: another machine holds the run's lease.
        RefusedError: the run cannot go on on this machine (one line: why and how).
    """
    from pydantic import ValidationError

    from crw.journal.pg_run_files import RUN_JSON, kept_files
    from crw.journal.postgres import connect

    try:
        with connect(url) as conn:
            files = kept_files(conn, run)
    except Exception as err:  # psycopg's or the connection's (OSError)
        raise RefusedError(
            f"run {run} is not under {state / 'flow'} and the database at --db / CRW_DB "
            f"could not be read ({err}); start the database, or resume it where it ran"
        ) from err
    if RUN_JSON not in files:
        return None
    try:
        kept = RunSpec.model_validate_json(files[RUN_JSON])
    except ValidationError as err:
        raise RefusedError(
            f"the run.json the database keeps of run {run} is no run spec "
            f"({err.errors()[0]['msg']}); resume it on the machine it ran on"
        ) from None
    spec = kept.model_copy(update={"journal_db": url})
    check_lease(spec)
    _check_movable(spec)
    return _made(RunDir.of(state, spec.id), files, spec)


def _made(run_dir: RunDir, files: dict[str, bytes], spec: RunSpec) -> RunDir:
    """Make `run_dir` from the kept `files` (run.json as `spec`): in a directory
    beside it, renamed into place once whole, so that no command meets half a run.

    Raises:
        RefusedError: it cannot be written, or another command made it meanwhile.
    """
    from crw.journal.pg_run_files import RUN_JSON

    making = RunDir(run_dir.root.with_name(f"{MAKING_PREFIX}{spec.id}-{os.urandom(4).hex()}"))
    making.create()
    # Its run lock held while it is made (and renamed: the lock goes with it), so
    # `gc` deletes only a directory no resume is making: one a crash left.
    lock = run_lock(making)
    try:
        for name, data in files.items():
            if name != RUN_JSON:
                (making.root / name).parent.mkdir(mode=0o700, exist_ok=True)
                write_atomic(making.root / name, data)
        write_run_spec(making.run_json, spec)
        making.root.rename(run_dir.root)
        fsync_dir(run_dir.root.parent)
    except OSError as err:
        raise RefusedError(
            f"cannot make run {spec.id}'s directory {run_dir.root} ({err.strerror or err}); "
            "make the state directory writable (or, if another resume made it, follow the "
            f"run with crw flow status {spec.id}), then resume again"
        ) from err
    finally:
        shutil.rmtree(making.root, ignore_errors=True)
        lock.release()
    return run_dir


def _check_movable(spec: RunSpec) -> None:
    """Refuse a run that cannot go on on this machine.

    Raises:
        RefusedError: a session run, a recorded TMPDIR this machine lacks, a
            workflow file missing or changed here.
    """
    from crw.engine.config.workflow import load_workflow  # a resume here never parses it

    if spec.backend == "session":
        raise RefusedError(
            f"run {spec.id} is a session run: its owner thread {spec.owner} and its step bus "
            "are on the machine it ran on; resume it there (crw flow resume "
            f"{spec.id}), since a session run goes on only beside its owner"
        )
    problem = recorded_problem(spec.env_overrides())
    if problem is not None:
        raise RefusedError(f"run {spec.id} cannot go on on this machine: {problem}")
    path = Path(spec.workflow.path)
    try:
        with spec.file_limit():
            changed = changed_workflow(spec, load_workflow(path))
    except CrwError as err:
        raise RefusedError(
            f"run {spec.id}'s workflow {path} cannot be read on this machine ({err}); "
            f"check out its repository {spec.repository} at {spec.head} at the same path, "
            "then resume again"
        ) from err
    if changed is not None:
        raise RefusedError(
            f"{changed} on this machine (check out {spec.repository} at {spec.head}), "
            "then resume again"
        )
