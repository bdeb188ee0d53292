"""`crw flow gc`'s cleaning of the run directories a resume left half-made.

`crw flow resume RUN` on a machine that has no directory of a database's run
makes it beside its place (`<state>/flow/.resuming-RUN-<hex>`, its run lock held
while it is made) and renames it into place once whole
(`crw.cli.run.resume_here`). A crash between leaves that directory: no command
reads it, and the run's rows stay in the database, whole. gc deletes it where
it can take its run lock (no resume is making it), never the run's rows.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from crw.cli.run.resume_here import MAKING_PREFIX
from crw.engine.run.locks import RunHeldError, holder_pid, run_lock
from crw.engine.run.rundir import RunDir
from crw.errors import RefusedError


def is_left_resume(root: Path) -> bool:
    return root.name.startswith(MAKING_PREFIX)


def clean_left_resume(root: Path, dry_run: bool) -> dict[str, Any]:
    """Delete `root`, a `.resuming-` directory, unless a resume holds it:
    {"dir", "run", "removed": True}, or {"dir", "run", "reason"} (skipped)."""
    run = root.name[len(MAKING_PREFIX) :].rpartition("-")[0] or root.name
    entry: dict[str, Any] = {"dir": str(root), "run": run}
    making = RunDir(root)
    try:
        lock = run_lock(making)
    except RunHeldError:
        pid = holder_pid(making.run_lock)
        by = f" (pid {pid})" if pid is not None else ""
        return entry | {"reason": f"{root.name} is being made by a resume of run {run}{by}"}
    except RefusedError as err:
        if not root.exists():  # renamed into place meanwhile: a resume finished it
            return entry | {"reason": f"{root.name} was just made run {run}'s directory"}
        return entry | {"reason": str(err)}
    try:
        if not dry_run:
            shutil.rmtree(root, ignore_errors=True)
    finally:
        lock.release()
    return entry | {"removed": True}


def left_resume_lines(payload: dict[str, Any]) -> list[str]:
    verb = "would remove" if payload["dry_run"] else "removed"
    return [
        f"{verb} {entry['dir']}: a resume of run {entry['run']} left it half-made "
        "(its rows stay in the database; resume the run again to go on)"
        if entry.get("removed")
        else f"skipped: {entry['reason']}"
        for entry in payload.get("resumes_left", ())
    ]
