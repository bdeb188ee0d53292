"""`crw flow rm RUN` and `crw flow gc --ended-before DATE | --older-than AGE [--refs]`:
remove runs' directories (and, with --refs, the refs of runs gone: `gc_refs`).

A live run is never removed: the command takes the run's start lock, launch lock
and run lock (each without waiting), so no process holds the run, none is being
launched and no start is under way while it removes it; a run directory without
run.json is a start that has not written it yet (it writes it under its start
lock) and is left alone. Under those locks the directory is renamed out of the
way (`<state>/flow/.removed-<run>-<hex>`, atomic: no command finds the run any
more), then deleted; a crash mid-delete leaves only such a directory, which the
next `gc` deletes.

`gc` removes the runs that ended before DATE: ended, judged again under the locks,
at the time of the journal's last row (the ended row, or the answer that aborted
the run).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json as json_module
import logging
import os
import shlex
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from crw.binding.owner import close_open_line
from crw.cli import when
from crw.cli.output import emit
from crw.cli.run.gc_refs import REMOVED_PREFIX, prune_refs, refs_lines, refs_repository
from crw.cli.run.gc_resuming import clean_left_resume, is_left_resume, left_resume_lines
from crw.cli.run.remove_db import held_elsewhere, remove_rows
from crw.cli.run.remove_db import last_row_at as db_last_row_at
from crw.cli.run.remove_remote import gc_database_runs, rm_database_run
from crw.engine.run.host_wait import stop_waiter
from crw.engine.run.locks import RunHeldError, holder_pid, launch_lock, run_lock, start_lock
from crw.engine.run.rundir import FLOW, RunDir, find_run, resolve_state
from crw.errors import CrwError, InputError, RefusedError
from crw.journal.snapshot import replay_journal
from crw.private import fsync_dir
from crw.workspace.release import release_run

TAIL_BYTES = 65536
"""How much of a journal's end is read for its last row's time."""


def rm_command(run: str, *, state: str | None, json: bool, db: str | None = None) -> int:
    """Remove one run that is not live (one only the database keeps: `rm_database_run`)."""
    state_dir = resolve_state(state, os.environ, Path.cwd())
    try:
        run_dir = find_run(state_dir, run)
    except InputError as missing:
        gone = rm_database_run(state_dir, run, db, missing)
        emit(json, gone, f"removed run {run} from the {gone['journal_db']} ({gone['rows']} rows)")
        return 0
    stop_waiter(run_dir)  # the process of a run paused host_unavailable that waits for its host
    with _quiet(run_dir) as refusal:
        if refusal is not None:
            raise RefusedError(refusal)
        status = _run_state(run_dir)
        closed = close_line(run_dir)
        kept = _remove(run_dir)
    emit(
        json,
        {"run": run_dir.id, "run_dir": str(run_dir.root), "removed": True}
        | status
        | {"closed_line": closed}
        | ({"rows_kept": kept} if kept else {}),
        f"removed run {run_dir.id} ({_said(status)}): {run_dir.root}{_closed(closed)}"
        + (f"; {kept}" if kept else ""),
    )
    return 0


def gc_command(
    *,
    ended_before: str | None,
    dry_run: bool,
    state: str | None,
    json: bool,
    older_than: str | None = None,
    refs: bool = False,
    repo: str | None = None,
    yes: bool = False,
    db: str | None = None,
) -> int:
    """Remove every run that ended before `ended_before` (or longer than
    `older_than` ago) and is not live, and with `db` the database's runs no
    directory here holds (`gc_database_runs`); with `refs`, then list (delete, with
    `yes`) the refs of the runs that no longer exist. Every value is judged before
    anything is removed."""
    before = _gc_before(ended_before, older_than, refs=refs, yes=yes, dry_run=dry_run)
    if db is not None and before is None:
        raise InputError("--db names the database whose ended runs gc removes; add "
                         "--ended-before DATE or --older-than AGE, or leave --db out")  # fmt: skip
    state_dir = resolve_state(state, os.environ, Path.cwd())
    root = refs_repository(state_dir, repo) if refs else None
    payload: dict[str, Any] = {"dry_run": dry_run}
    lines: list[str] = []
    if before is not None:
        payload |= _gc_runs(state_dir / FLOW, before, dry_run) | {"older_than": older_than}
        if db is not None:
            remote = gc_database_runs(state_dir, db, before, dry_run)
            payload["removed"] += remote["removed"]
            payload["skipped"] += remote["skipped"]
        lines = _gc_lines(payload)
    if root is not None:
        gone = [entry["run"] for entry in payload.get("removed", ())]
        payload["refs"] = prune_refs(state_dir, root, gone=gone, dry_run=dry_run or not yes)
        again = ["crw", "flow", "gc"]
        if dry_run and before is not None:  # the runs' refs go once the runs do
            again += ["--ended-before", ended_before] if ended_before else []
            again += ["--older-than", older_than] if older_than else []
        again += ["--refs", "--yes", *(["--repo", repo] if repo else []), "--state", str(state_dir)]
        lines += refs_lines(payload["refs"], shlex.join(again))
    emit(json, payload, "\n".join(lines))
    return 0


def _gc_before(
    ended_before: str | None, older_than: str | None, *, refs: bool, yes: bool, dry_run: bool
) -> _dt.datetime | None:
    """The time the runs to remove ended before; None when only refs are pruned.

    Raises:
        InputError: no choice, two, or values that are none.
    """
    if ended_before is not None and older_than is not None:
        raise InputError("--ended-before and --older-than both say which runs to remove; give one")
    if yes and not refs:
        raise InputError(
            "--yes confirms deleting the refs --refs lists; add --refs, or leave --yes out"
        )
    if yes and dry_run:
        raise InputError("--yes deletes and --dry-run deletes nothing; leave one out")
    if ended_before is not None:
        return when.date("--ended-before", ended_before)
    if older_than is not None:
        now = _dt.datetime.now(_dt.UTC).replace(microsecond=0)
        return when.ago("--older-than", older_than, now)
    if not refs:
        raise InputError(
            "gc needs what to remove; pass --ended-before DATE or --older-than AGE (runs "
            "that ended before), or --refs (the refs of runs that no longer exist)"
        )
    return None


def _gc_runs(flow: Path, before: _dt.datetime, dry_run: bool) -> dict[str, Any]:
    """Remove (or, on a dry run, list) the runs of `flow` that ended before `before`."""
    removed: list[dict[str, Any]] = []
    skipped: list[dict[str, Any]] = []
    left: list[dict[str, Any]] = []
    for root in _entries(flow):
        if is_left_resume(root):  # a resume's half-made directory, never a run
            left.append(clean_left_resume(root, dry_run))
            continue
        if root.name.startswith(REMOVED_PREFIX):
            if not dry_run:  # a removal a crash cut short: its rows first, then its files
                try:
                    remove_rows(root)
                except RefusedError as err:
                    skipped.append({"run": root.name, "reason": str(err)})
                    continue
                shutil.rmtree(root, ignore_errors=True)
            continue
        ended = _ended_before(RunDir(root), before)
        if ended is None:
            continue
        with _quiet(RunDir(root)) as refusal:
            again = _ended_before(RunDir(root), before) if refusal is None else ended
            if refusal is not None:
                skipped.append({"run": root.name, "reason": refusal})
            elif again is not None:
                closed = None if dry_run else close_line(RunDir(root))
                if not dry_run:
                    _remove(RunDir(root))
                removed.append({"run": root.name} | again | {"closed_line": closed})
    return {
        "ended_before": when.iso(before),
        "removed": removed,
        "skipped": skipped,
        "resumes_left": left,
    }


def parse_date(text: str) -> _dt.datetime:
    """An ISO 8601 date or time; one without a zone is UTC.

    Raises:
        InputError: not a date.
    """
    return when.date("--ended-before", text)


@contextlib.contextmanager
def _quiet(run: RunDir) -> Iterator[str | None]:
    """Hold the run's start, launch and run locks; yields None, or why the run is
    live (then nothing is held)."""
    with contextlib.ExitStack() as stack:
        for take, path in (
            (start_lock, run.start_lock),
            (launch_lock, run.root / "launch.lock"),
            (run_lock, run.run_lock),
        ):
            try:
                stack.enter_context(take(run))
            except RunHeldError:
                stack.close()
                yield _live(run, path)
                return
        if not run.run_json.is_file():
            stack.close()
            yield f"run {run.id} has no run.json: a start is writing it; try again after it"
            return
        elsewhere = held_elsewhere(run)
        if elsewhere is not None:
            stack.close()
            yield elsewhere
            return
        yield None


def _live(run: RunDir, lock: Path) -> str:
    pid = holder_pid(lock)
    by = f" (pid {pid})" if pid is not None else ""
    return (
        f"run {run.id} is live: a process holds its {lock.name}{by}; it is not removed: "
        f"cancel it (crw flow cancel {run.id}) or let it end, then remove it"
    )


def close_line(run: RunDir) -> str | None:
    """CloseOrchestrator for a run about to be removed, under its locks (it is not
    live): when its owner's last line is the run's open line (a process that died
    left it open), the closed line is appended, before the directory whose run.json
    names the owner goes (a crash between the two leaves a run whose rm closes
    nothing and removes it). Returns the owner thread whose line it closed, else
    None; a close that cannot be written is a warning (the next start on the
    thread closes it) and the run is removed all the same."""
    try:
        owner = json_module.loads(run.run_json.read_text(encoding="utf-8")).get("owner")
    except (OSError, ValueError, AttributeError):
        return None
    if not isinstance(owner, str) or not owner:
        return None
    closed, warning = close_open_line(run.root.parent.parent, owner, run.id)
    if warning is not None:
        logging.getLogger("crw.rm").warning("%s", warning)
    return owner if closed else None


def _closed(owner: str | None) -> str:
    return "" if owner is None else f"; closed owner thread {owner}'s line, which it left open"


def _remove(run: RunDir) -> str | None:
    """Rename the run's directory out of the way (durably), delete its rows where a
    database keeps them, then delete the directory; why its rows were kept (another
    machine took the run last), else None.

    Raises:
        RefusedError: it cannot be renamed or deleted, or its rows cannot.
    """
    release_run(run)  # worktrees and evidence records a cut-short release left
    aside = run.root.with_name(f"{REMOVED_PREFIX}{run.id}-{os.urandom(4).hex()}")
    try:
        run.root.rename(aside)
        fsync_dir(aside.parent)  # the intent, before the database's rows go
        kept = remove_rows(aside)
        shutil.rmtree(aside)
    except OSError as err:
        raise RefusedError(
            f"cannot remove run {run.id} ({err.filename}: {err.strerror or err}); "
            f"make {run.root.parent} writable and run it again"
        ) from None
    return kept


def _entries(flow: Path) -> list[Path]:
    try:
        return sorted(path for path in flow.iterdir() if path.is_dir())
    except FileNotFoundError:
        return []


def _run_state(run: RunDir) -> dict[str, Any]:
    """The run's state as its journal reads; `unreadable` for a damaged journal
    (a run that cannot be read is removed all the same)."""
    try:
        state, _ = replay_journal(run.journal)
    except CrwError:
        return {"state": "unreadable", "ended_status": None}
    return {"state": state.state, "ended_status": state.ended_status}


def _ended_before(run: RunDir, before: _dt.datetime) -> dict[str, Any] | None:
    """The run's end ({ended_status, ended_at}) when it ended before `before`."""
    status = _run_state(run) if run.run_json.is_file() else {"ended_status": None}
    at = (
        last_row_at(run.journal) or db_last_row_at(run)
        if status["ended_status"] is not None
        else None
    )
    if at is None or parse_date(at) >= before:
        return None
    return {"ended_status": status["ended_status"], "ended_at": at}


def last_row_at(journal: Path) -> str | None:
    """The `at` of the journal's last row, read from its end."""
    try:
        with journal.open("rb") as file:
            file.seek(max(file.seek(0, os.SEEK_END) - TAIL_BYTES, 0))
            tail = file.read()
    except OSError:
        return None
    for line in reversed(tail.splitlines()):
        with contextlib.suppress(ValueError):
            row = json_module.loads(line)
            if isinstance(row, dict) and isinstance(row.get("at"), str):
                return str(row["at"])
    return None


def _said(status: dict[str, Any]) -> str:
    if status["ended_status"]:
        return f"ended {status['ended_status']}"
    return str(status["state"])


def _gc_lines(payload: dict[str, Any]) -> list[str]:
    verb = "would remove" if payload["dry_run"] else "removed"
    lines = [
        f"{verb} run {r['run']} (ended {r['ended_status']} at {r['ended_at']})"
        + _closed(r["closed_line"])
        for r in payload["removed"]
    ]
    lines += [f"skipped: {s['reason']}" for s in payload["skipped"]]
    lines += left_resume_lines(payload)
    window = f"ended before {payload['ended_before']}"
    if payload["older_than"]:
        window += f", {payload['older_than']} ago"
    lines.append(
        f"gc: {len(payload['removed'])} run(s) {verb}, {len(payload['skipped'])} live skipped "
        f"({window})"
    )
    return lines
