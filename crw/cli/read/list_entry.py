"""One run's entry of `crw flow list`, from run.json and from the replay of its
rows: what the state directory's list and the database's (`list_db`) share, so a
run shows the same columns whichever store keeps its journal.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

from crw.cli.read.list_table import age, backend
from crw.cli.read.run_spec import workflow_file, workflow_plan
from crw.cli.read.status_text import short_tokens
from crw.engine.views.counts import counts, shown_state
from crw.engine.views.run_view import outcome, parse_at
from crw.journal.log import JournalRead
from crw.journal.replay import RunState

TAIL_MAX = 1 << 20
"""The most journal bytes after the snapshot (or of a journal without one) a list
decodes; a run with more is read as `status` reads it."""


def head(run_id: str, spec: dict[str, Any], live: bool, pid: int | None) -> dict[str, Any]:
    """An entry's part read from run.json (`spec`, empty where it is not on this
    machine) and the run's holder: run, workflow, workflow_file, backend, rerun,
    live and pid."""
    return {
        "run": run_id,
        "workflow": workflow_name(spec, run_id),
        "workflow_file": workflow_file(spec),
        "backend": spec.get("backend"),
        "rerun": spec.get("rerun") or None,
        "live": live,
        "pid": pid,
    }


def of_state(entry: dict[str, Any], run: RunState, read: str, resume: str | None) -> dict[str, Any]:
    """An entry's part read from the run's rows (`run`, their replay; `read`: tail
    or whole); `resume` is the command that goes on with it, shown when it crashed
    (None: none here)."""
    view = outcome(run)
    ended = run.state == "ended"  # an ended run counts the calls it ran
    plan = {} if ended else workflow_plan(entry["workflow_file"])
    state = shown_state(view.state, entry["live"])
    return {
        "backend": run.backend or entry["backend"],
        "state": state,
        "rows_state": view.state,
        "reason": view.reason,
        "resume": resume if state == "crashed" else None,
        "calls": counts(run, plan, live=entry["live"]).to_json(),
        "tokens": run.spent,
        "started_at": run.started_at,
        "last_at": run.last_at,
        "read": read,
    }


def how_read(read: JournalRead) -> str:
    """How `replay_journal` read a store's run: `tail` where it took the snapshot
    the store keeps and folded the rows after it (its first row is not the
    journal's first, or no row came after it), `whole` where it read every row."""
    return "tail" if not read.rows or read.rows[0]["seq"] > 1 else "whole"


def unread(state: str, reason: str) -> dict[str, Any]:
    """The entry of a run whose journal cannot be read: its state and why; `read`
    says how much of it was: a damage is found reading it whole (and reported
    with its offsets), a journal that cannot be read was not read."""
    return {
        "state": state,
        "rows_state": None,
        "reason": reason,
        "resume": None,
        "calls": None,
        "tokens": None,
        "started_at": None,
        "last_at": None,
        "read": "whole" if state == "corrupt" else None,
    }


def workflow_name(spec: dict[str, Any], run_id: str) -> str | None:
    """The workflow's name: the run id's head (`<name>-YYYYMMDD-HHMMSS-xxxx`), else
    the workflow file's stem."""
    head, *stamp = run_id.rsplit("-", 3)
    if len(stamp) == 3 and stamp[0].isdigit() and stamp[1].isdigit():
        return head
    path = workflow_file(spec)
    return Path(path).stem if path is not None else None


def age_of(at: str | None, now: datetime) -> str:
    """The age of `at`: `12s`, `5m`, `3h`, `4d`; `-` for none."""
    then = parse_at(at)
    return age(None if then is None else max(0, int((now - then).total_seconds())))


def cells(entry: dict[str, Any], now: datetime) -> tuple[str, ...]:
    state = entry["state"]
    if entry["reason"] and state not in ("corrupt", "unreadable"):
        state += f" ({entry['reason'].partition(':')[0]})"
    calls, tokens = entry["calls"], entry["tokens"]
    return (
        entry["run"],
        backend(entry["backend"]),
        state,
        f"{calls['done']}/{calls['total']}" if calls else "-",
        short_tokens(tokens["total"]) if tokens else "-",
        age_of(entry["last_at"], now),
        "yes" if entry["live"] else "no",
    )
