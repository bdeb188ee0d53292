"""`crw flow list`: the runs under the state directory, newest first.

Each run is read from its tail, not its whole journal: run.json (plain JSON), the
replay snapshot a run's process leaves beside the journal when it exits (and
`status`/`next` refresh), and the journal's rows after the snapshot's end, folded
on. The snapshot is taken as the journal's first `end` bytes without reading them
(its own seal is checked; the journal's rows from `end` must go on from its last
seq, else it is not taken). A run with no snapshot it can take, or more than
`TAIL_MAX` bytes of journal after it, is read as `status` reads it (which leaves a
snapshot, so the next list reads its tail). Nothing is locked and no row is written.

The filters (`list_filter`) are judged before the journal is read where they can
be (`--workflow`, from run.json), else on the entry; `--limit` cuts what is left.
"""

from __future__ import annotations

import gc
import os
import shlex
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from crw.cli.output import emit
from crw.cli.read.list_entry import (
    TAIL_MAX,
    cells,
    head,
    how_read,
    of_state,
    unread,
    workflow_name,
)
from crw.cli.read.list_filter import list_filters
from crw.cli.read.list_table import fit
from crw.cli.read.list_url import listed_db
from crw.cli.read.run_spec import spec_json, workflow_file
from crw.engine.run.locks import holder_pid, run_is_live
from crw.engine.run.rundir import RunDir, list_runs, resolve_state
from crw.engine.views.run_view import parse_at
from crw.errors import CrwError
from crw.journal.log import JournalCorruptError, decode
from crw.journal.replay import RunState, replay
from crw.journal.snapshot import SNAPSHOT, peek_snapshot, replay_journal
from crw.journal.stores import DB_MEMBER, store_at

ENDED_SHOWN = timedelta(days=7)
"""Without --all, an ended run whose last row is older than this is not listed."""


@dataclass(frozen=True)
class Tail:
    """A run's state and how it was read: `tail` (the snapshot and the rows after
    it, the store's or the file's, or a journal of at most TAIL_MAX bytes) or
    `whole` (every row decoded, or a file's every byte read)."""

    state: RunState
    read: str


def read_tail(run: RunDir) -> Tail:
    """The run's state, from its snapshot and the journal's rows after it.

    Raises:
        OSError: the journal cannot be read.
        JournalCorruptError: the journal is damaged (not a torn tail).
    """
    if store_at(run.journal).wake_file is None:  # its store's snapshot and the rows after it
        state, kept = replay_journal(run.journal, live=run_is_live(run))
        return Tail(state, how_read(kept))
    snapshot = peek_snapshot(run.root / SNAPSHOT)
    try:
        size = run.journal.stat().st_size
    except FileNotFoundError:
        return Tail(replay(()), "tail")
    start = snapshot.end if snapshot is not None and snapshot.end <= size else 0
    if size - start <= TAIL_MAX:
        with run.journal.open("rb") as file:
            file.seek(start)
            data = file.read()
        into = snapshot.state if snapshot is not None and start else None
        if not data:
            return Tail(into if into is not None else replay(()), "tail")
        try:
            read = decode(data, run.journal, after=into.last_seq if into is not None else 0)
        except JournalCorruptError:
            read = None  # read whole below: the damage is reported with its offsets
        if read is not None and read.end > 0:
            return Tail(replay(read.rows, into=into), "tail")
    return Tail(replay_journal(run.journal, live=run_is_live(run))[0], "whole")


def list_command(
    *,
    state: str | None,
    json: bool,
    all_runs: bool = False,
    status: Sequence[str] = (),
    workflow: str | None = None,
    since: str | None = None,
    limit: int | None = None,
    db: str | None = None,
) -> int:
    gc.disable()  # a short process that keeps what it reads, as `crw.cli.hot` says
    now = datetime.now(UTC)
    chosen = list_filters(status, workflow, since, limit, now, Path.cwd())
    state_dir = resolve_state(state, os.environ, Path.cwd())
    state_ref = shlex.quote(str(state_dir))
    url = listed_db(db, state_dir, os.environ)
    ids = list_runs(state_dir)
    section = None
    if url:
        from crw.cli.read.list_db import database_section

        section = database_section(url, state_dir, state_ref, frozenset(ids))
    runs = []
    for run_id in ids:
        run = RunDir.of(state_dir, run_id)
        spec = spec_json(run)
        if chosen.of_workflow(workflow_name(spec, run_id), workflow_file(spec)):
            kept = section["read"].get(run_id) if section is not None else None
            if kept is not None and spec.get(DB_MEMBER) == url:
                runs.append(kept)  # read with the database's runs, in its one query
            else:
                runs.append(listed(run, state_ref, spec))
    runs = [entry for entry in runs if chosen.keeps(entry)]
    runs.sort(key=lambda entry: (entry["started_at"] or "", entry["run"]), reverse=True)
    window = all_runs or chosen.since is not None  # --since is a window of its own
    shown = runs if window else [entry for entry in runs if not _old_ended(entry, now)]
    cut = shown[: chosen.limit] if chosen.limit is not None else shown
    payload = {
        "state_dir": str(state_dir),
        "runs": cut,
        "hidden": len(runs) - len(shown),
        "more": len(shown) - len(cut),
    }
    narrowed = bool(chosen.statuses or workflow or since)
    if section is None:
        emit(json, payload, lambda: _human(payload, state_dir, now, narrowed))
        return 0
    from crw.cli.read.list_db import database_lines

    payload["database"] = {"where": section["where"], "runs": section["runs"]}
    emit(
        json,
        payload,
        lambda: "\n".join(
            [_human(payload, state_dir, now, narrowed), *database_lines(section, now)]
        ),
    )
    return 0


def listed(run: RunDir, state_ref: str = "", spec: dict[str, Any] | None = None) -> dict[str, Any]:
    """One run's entry: run, workflow (its name), workflow_file, backend, state
    (`crashed` when no process holds a run that needs one: `counts.shown_state`),
    rows_state (the state its rows leave it in), reason (a paused run's, an ended
    run's status, a corrupt or unreadable journal's damage), calls ({done, total,
    in_flight, held, nodes}: `crw.engine.views.counts`, as status counts them),
    tokens, started_at, last_at, live, pid (the holder's, when live), read (tail
    or whole), rerun (a rerun's {run, node}: its source and the node it ran afresh
    from, else null) and resume (a crashed run's command that goes on with it, else null;
    `state_ref` is the --state it passes, empty for none). `spec` is its run.json
    when read already."""
    spec = spec_json(run) if spec is None else spec
    live = run_is_live(run)
    entry = head(run.id, spec, live, holder_pid(run.run_lock) if live else None)
    try:
        tail = read_tail(run)
    except JournalCorruptError as err:
        return entry | unread("corrupt", err.damage)
    except (CrwError, OSError) as err:
        return entry | unread("unreadable", str(err))
    return entry | of_state(entry, tail.state, tail.read, _resume(run, state_ref))


def _resume(run: RunDir, state_ref: str) -> str:
    """The command that goes on with a crashed run."""
    state = f" --state {state_ref}" if state_ref else ""
    return f"crw flow resume {run.id} --detach{state}"


def _old_ended(entry: dict[str, Any], now: datetime) -> bool:
    last = parse_at(entry["last_at"])
    return entry["state"] == "ended" and last is not None and now - last > ENDED_SHOWN


def _human(payload: dict[str, Any], state_dir: Path, now: datetime, narrowed: bool) -> str:
    runs = payload["runs"]
    if not runs and not payload["hidden"]:
        if narrowed:
            return (
                f"no run under {state_dir / 'flow'} matches; list every run with: "
                f"crw flow list --all --state {shlex.quote(str(state_dir))}"
            )
        return f"no runs under {state_dir / 'flow'}; start one with: crw flow start WORKFLOW"
    width = shutil.get_terminal_size((80, 24)).columns
    lines = fit([cells(entry, now) for entry in runs], width)
    if payload["more"]:
        lines.append(f"({payload['more']} older runs not shown: a higher --limit lists them)")
    if payload["hidden"]:
        days = ENDED_SHOWN.days
        lines.append(
            f"({payload['hidden']} ended runs older than {days} days not shown: --all lists them)"
        )
    for entry in runs:
        rerun = entry.get("rerun")
        if isinstance(rerun, dict):
            lines.append(f"{entry['run']} reruns {rerun.get('run')} from {rerun.get('node')}")
    for entry in runs:
        if entry["resume"]:
            lines += [f"{entry['run']} crashed (its process is gone); go on with:",
                      f"  {entry['resume']}"]  # fmt: skip
    lines.append(f"see one with: crw flow status RUN --state {shlex.quote(str(state_dir))}")
    return "\n".join(lines)
