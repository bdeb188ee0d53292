"""What the pages show, read as the commands read it: the runs as `crw flow list`
lists them (`crw.cli.read.list.listed`), a run as `crw flow status --json` shows it
(`crw.cli.read.status.run_status`, through the replay snapshot), its rows as
`crw flow show` prints them (`crw.engine.views.row_lines`), a page at a time,
a call as `crw flow call` shows it (`crw.cli.read.call.read_call`).

No request reads a whole journal: a run's page replays the snapshot and the rows
after it, its calls and its rows come a page at a time, and a page of rows is a
window of the journal's bytes read from its end (HISTORY_BYTES), cut to whole
batches.
"""

from __future__ import annotations

import json
import shlex
import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from crw.cli.read.call import read_call
from crw.cli.read.list import listed
from crw.cli.read.list_filter import ENDED, STATES
from crw.cli.read.list_table import age
from crw.cli.read.run_spec import spec_json
from crw.cli.read.status import run_status
from crw.cli.read.status_text import call_notes, short_tokens
from crw.engine.run.locks import is_held, run_is_live
from crw.engine.run.rundir import RunDir, list_runs
from crw.engine.views.call_detail import CallDetail
from crw.engine.views.durations import duration
from crw.engine.views.row_lines import row_line
from crw.engine.views.run_view import parse_at
from crw.errors import CrwError
from crw.journal.log import JournalCorruptError, decode
from crw.journal.snapshot import replay_journal
from crw.journal.stores import store_at

RUNS_PAGE = 50
"""Runs a page of the runs list shows."""
CALLS_PAGE = 100
"""Calls a page of a run's calls table shows."""
HISTORY_BYTES = 64 * 1024
"""About how many bytes of journal a page of a run's rows reads (some 200 rows)."""


@dataclass(frozen=True)
class Page:
    """Which slice of a list a page shows: `number` from 1, of `pages`."""

    number: int
    pages: int
    total: int

    @classmethod
    def of(cls, total: int, size: int, asked: int) -> Page:
        pages = max(1, -(-total // size))
        return cls(min(max(1, asked), pages), pages, total)

    def cut(self, items: list[Any], size: int) -> list[Any]:
        return items[(self.number - 1) * size : self.number * size]


def state_ref(state_dir: Path) -> str:
    """The --state the commands a page shows pass."""
    return shlex.quote(str(state_dir))


def known_run(state_dir: Path, run: str) -> RunDir | None:
    """The run `run` names under `state_dir`, only by its id (never a path)."""
    return RunDir.of(state_dir, run) if run in list_runs(state_dir) else None


def runs(
    state_dir: Path, *, states: frozenset[str], workflow: str | None, page: int
) -> dict[str, Any]:
    """The runs list: the entries `crw flow list --json --all` gives, of the
    states (or ended statuses) and workflow asked, newest first, a page of them."""
    ref = state_ref(state_dir)
    entries = []
    ids = list_runs(state_dir)
    _forget_listed(state_dir, ids)
    for run_id in ids:
        entry = _listed(RunDir.of(state_dir, run_id), ref)
        if workflow and entry["workflow"] != workflow:
            continue
        if states and not (
            entry["state"] in states or (entry["state"] == "ended" and entry["reason"] in states)
        ):
            continue
        entries.append(entry)
    entries.sort(key=lambda entry: (entry["started_at"] or "", entry["run"]), reverse=True)
    chosen = Page.of(len(entries), RUNS_PAGE, page)
    now = datetime.now(UTC)
    return {
        "runs": [_run_cells(entry, now) for entry in chosen.cut(entries, RUNS_PAGE)],
        "page": chosen,
        "states": [*STATES, *ENDED],
    }


_LISTED: dict[Path, tuple[tuple[int | bool, ...], dict[str, Any]]] = {}
"""Each run's entry in the runs list, by run directory, with what it was read
at: its journal's size, times and inode, run.json's, and whether a process held it."""
_LISTED_LOCK = threading.Lock()


def _listed(run: RunDir, ref: str) -> dict[str, Any]:
    """`crw flow list`'s entry of the run: read again only when its journal or
    run.json changed or a process took or let go of it since it was read (a runs
    list woken by one run's append reads that run, not every run's tail)."""
    key = _listed_key(run)  # before the read: a change during it reads again next time
    with _LISTED_LOCK:
        kept = _LISTED.get(run.root)
    if key is not None and kept is not None and kept[0] == key:
        return kept[1]
    entry = listed(run, ref, spec_json(run))
    if key is not None:
        with _LISTED_LOCK:
            _LISTED[run.root] = (key, entry)
    return entry


def _listed_key(run: RunDir) -> tuple[int | bool, ...] | None:
    """What the run's entry was read at (None: read it every time, as a run whose
    journal is in a database or not written yet)."""
    try:
        if store_at(run.journal).wake_file is None:
            return None
        journal, spec = run.journal.stat(), run.run_json.stat()
        live = run_is_live(run)
    except (CrwError, OSError):
        return None
    return (journal.st_size, journal.st_mtime_ns, journal.st_ino,
            spec.st_size, spec.st_mtime_ns, live)  # fmt: skip


def _forget_listed(state_dir: Path, ids: list[str]) -> None:
    """Drop the entries of the state's runs that are gone."""
    flow = RunDir.of(state_dir, "-").root.parent
    with _LISTED_LOCK:
        for root in [root for root in _LISTED if root.parent == flow and root.name not in ids]:
            del _LISTED[root]


def _run_cells(entry: dict[str, Any], now: datetime) -> dict[str, Any]:
    calls, tokens = entry["calls"], entry["tokens"]
    last = parse_at(entry["last_at"])
    return entry | {
        "calls_text": f"{calls['done']}/{calls['total']}" if calls else "-",
        "tokens_text": short_tokens(tokens["total"]) if tokens else "-",
        "started_text": _at(entry["started_at"]),
        "last_text": age(None if last is None else max(0, int((now - last).total_seconds()))),
    }


def run_page(run: RunDir, state_dir: Path, *, page: int) -> dict[str, Any]:
    """A run's page: `crw flow status --json`'s object, its calls a page of them,
    each with its cells as the page shows them."""
    payload = _status(run, state_ref(state_dir))
    calls = payload["calls"]
    chosen = Page.of(len(calls), CALLS_PAGE, page)
    return payload | {
        "calls": [call_cells(call) for call in chosen.cut(calls, CALLS_PAGE)],
        "calls_page": chosen,
        "held": [call for call in calls if "answer" in call],
        "by_call": {call["call"]: call for call in calls},
    }


_ENDED: dict[Path, tuple[tuple[int, ...], dict[str, Any]]] = {}
"""The status of the ended runs read last (ENDED_KEPT of them), by run directory,
with the journal's size and times and steps/'s time it was read at."""
ENDED_KEPT = 8
_ENDED_LOCK = threading.Lock()


def _status(run: RunDir, ref: str) -> dict[str, Any]:
    """`run_status` of the run; of an ended run no process holds, the one read
    before while its journal and steps/ are unchanged (a 10,000-call run's status
    is built in a few hundred ms; a finished run's page is asked for again and
    again, by its fragments and its decisions' pages)."""
    key = _ended_key(run)
    with _ENDED_LOCK:
        kept = _ENDED.get(run.root)
    if key is not None and kept is not None and kept[0] == key:
        return kept[1]
    payload = run_status(run, ref)
    if key is not None and payload["state"] == "ended" and not payload["live"]:
        with _ENDED_LOCK:
            _ENDED.pop(run.root, None)
            _ENDED[run.root] = (key, payload)
            while len(_ENDED) > ENDED_KEPT:
                del _ENDED[next(iter(_ENDED))]
    return payload


def _ended_key(run: RunDir) -> tuple[int, ...] | None:
    try:
        journal = run.journal.stat()
        steps = run.steps.stat().st_mtime_ns if run.steps.exists() else 0
    except OSError:
        return None
    return (journal.st_size, journal.st_mtime_ns, journal.st_ino, steps)


def call_cells(call: dict[str, Any]) -> dict[str, Any]:
    """A call's status entry with its cells as the page shows them (the reason as
    status prints it under the call's line)."""
    tokens = call["tokens"]
    return call | {
        "tokens_text": short_tokens(tokens["total"]) if tokens else "-",
        "time_text": duration(call["seconds"]),
        "reason_text": call_notes(call) or call["reason"] or "",
    }


def call_view(run: RunDir, state_dir: Path, call: str) -> CallDetail | None:
    """Call `call` of the run as `crw flow call RUN CALL --json` shows it (its rows,
    packets, schema and, on git, changed files; never the host's transcript), or
    None when the journal cannot be replayed."""
    try:
        run_state, read = replay_journal(run.journal, live=is_held(run.run_lock))
    except JournalCorruptError:
        return None
    return read_call(run, run_state, read.end, call, state_ref=state_ref(state_dir))


def pretty(value: Any) -> str:
    """`value` as indented JSON (a string, for the page to escape)."""
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


def history(run: RunDir, *, before: int | None) -> dict[str, Any]:
    """A page of the run's rows as `crw flow show` prints them: the whole batches
    in the last HISTORY_BYTES (or more, for a batch larger) of the journal before
    offset `before` (None: its end), and the offset where the page before it
    ends (None at the journal's start)."""
    try:
        size = run.journal.stat().st_size
    except FileNotFoundError:
        return {"lines": [], "older": None, "end": 0}
    end = size if before is None else max(0, min(before, size))
    window = HISTORY_BYTES
    with run.journal.open("rb") as file:
        while True:
            start = max(0, end - window)
            file.seek(start)
            data = file.read(end - start)
            begin, after = _batch_start(data) if start else (0, 0)
            if begin < len(data) or start == 0:
                break
            window *= 2  # no batch starts in the window: a batch larger than it
    try:
        rows = decode(data[begin:], run.journal, after=after).rows
    except JournalCorruptError as err:
        rows = err.intact.rows
    older = start + begin
    return {"lines": [row_item(row) for row in rows], "older": older or None, "end": end}


def row_item(row: dict[str, Any]) -> dict[str, Any]:
    """A row as a page lists it: its seq, call and `crw flow show` line."""
    return {"seq": row.get("seq"), "call": row.get("call"), "text": row_line(row)}


def _batch_start(data: bytes) -> tuple[int, int]:
    """Where the first batch that starts within `data` begins (`data` cut at any
    byte) and the seq before it: just after the first whole line that closes a
    batch (seq == commit_seq); (len(data), 0) when none does."""
    pos = data.find(b"\n") + 1
    while 0 < pos < len(data):
        nxt = data.find(b"\n", pos)
        if nxt < 0:
            break
        try:
            head = json.loads(data[pos : nxt + 1])
        except ValueError:
            head = None
        pos = nxt + 1
        if isinstance(head, dict) and head.get("seq") == head.get("commit_seq"):
            return pos, int(head["seq"])
    return len(data), 0


_TIMELINES: dict[Path, tuple[tuple[int, ...], str]] = {}
"""The timelines of the runs no process held drawn last (ENDED_KEPT of them), by
run directory, with the journal's size and times they were drawn at."""


def timeline_svg(run: RunDir) -> str:
    """The run's timeline as `crw flow timeline --out FILE.svg` draws it: from the
    snapshot of its fold and the rows after it (`crw.cli.read.timeline_read`). Of
    a run no process holds (nothing is drawn up to now) the picture drawn before
    while its journal is unchanged."""
    from crw.cli.read.timeline import render_svg
    from crw.cli.read.timeline_read import read_tracks
    from crw.engine.views.timeline import MAX_LANES, layout_tracks

    key = _ended_key(run)  # before the read: a change during it draws again next time
    live = is_held(run.run_lock)
    with _ENDED_LOCK:
        kept = _TIMELINES.get(run.root)
    if not live and key is not None and kept is not None and kept[0] == key:
        return kept[1]
    now = datetime.now(UTC) if live else None
    svg = render_svg(layout_tracks(read_tracks(run, now=now, live=live), run=run.id,
                                   max_lanes=MAX_LANES))  # fmt: skip
    if not live and key is not None:
        with _ENDED_LOCK:
            _TIMELINES.pop(run.root, None)
            _TIMELINES[run.root] = (key, svg)
            while len(_TIMELINES) > ENDED_KEPT:
                del _TIMELINES[next(iter(_TIMELINES))]
    return svg


def _at(at: str | None) -> str:
    return f"{at[:10]} {at[11:19]}" if at and len(at) >= 19 else "-"
