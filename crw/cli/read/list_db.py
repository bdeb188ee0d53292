"""The runs of a PostgreSQL database in `crw flow list --db URL` (or $CRW_DB): each
with the columns `list` shows for a run of the state directory (state and reason,
calls, tokens, started, last row, live), the machine its writer last ran on and
whether this machine has its run directory (the run's bus, packets and workspaces
are on the machine that runs it).

Every run is read in one query (`crw.journal.pg_runs`): its replay snapshot and
its rows after it, folded here as `list` folds a file run's tail, so no run's
journal is read whole. A run whose snapshot cannot be taken, or whose rows after
it are more than list reads, is read as `status` reads it (which keeps a new
snapshot in the database). A run is live where this machine holds its run lock,
or where another machine's writer holds its lease.
"""

from __future__ import annotations

import shutil
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from crw.cli.read.list_entry import TAIL_MAX, cells, head, how_read, of_state, unread
from crw.cli.read.list_table import fit
from crw.cli.read.run_spec import spec_json
from crw.engine.run.locks import holder_pid, run_is_live
from crw.engine.run.rundir import FLOW, RunDir, list_runs
from crw.errors import CrwError, RefusedError
from crw.journal.log import JournalCorruptError, decode
from crw.journal.replay import RunState, replay
from crw.journal.run_summary import parse_summary
from crw.journal.snapshot import parse_snapshot, replay_journal
from crw.journal.stores import check_db_url, keep_store, open_store

if TYPE_CHECKING:
    from crw.journal.pg_runs import DatabaseRun

DATABASE_KEYS = ("machine", "lease_until", "held", "last_seq", "here")
"""An entry's members beyond a state directory run's: the database's."""


def database_section(
    url: str, state_dir: Path, state_ref: str = "", here: frozenset[str] | None = None
) -> dict[str, Any]:
    """`--json`'s `database`: {where, runs: [list's entry of each run, and machine,
    lease_until, held, last_seq, here]}, and `read`: each run's entry as the state
    directory's list shows it (without the database's members), by id.

    Raises:
        InputError: not a PostgreSQL URL.
        RefusedError: the database cannot be read.
    """
    check_db_url(url)
    from crw.journal.pg_runs import database_runs
    from crw.journal.postgres import machine_id, where

    try:
        runs = database_runs(url, TAIL_MAX)
    except OSError as err:
        fix = "start the database or fix --db / CRW_DB"
        raise RefusedError(f"{err.strerror or err}; {fix}") from err
    this_machine = machine_id()
    dirs = frozenset(list_runs(state_dir)) if here is None else here
    flow = state_dir / FLOW
    entries = []
    for found in runs:
        run = RunDir(flow / found.run)  # its paths made only where they are used
        spec = spec_json(run) if found.run in dirs else {}
        held_here = bool(spec) and run_is_live(run)
        live = held_here or (found.held and found.machine != this_machine)
        pid = holder_pid(run.run_lock) if held_here else None
        entry = head(found.run, spec, live, pid)
        state = f" --state {state_ref}" if state_ref else ""
        # Another machine's run goes on there: its run directory is not here.
        resume = f"crw flow resume {found.run} --detach{state}" if spec else None
        try:
            folded, read = _fold(url, run, found, live)
            entry |= of_state(entry, folded, read, resume)
        except JournalCorruptError as err:
            entry |= unread("corrupt", err.damage)
        except (CrwError, OSError) as err:
            entry |= unread("unreadable", str(err))
        entries.append(
            entry
            | {
                "machine": found.machine,
                "lease_until": found.lease_until,
                "held": found.held,
                "last_seq": found.last_seq,
                "here": bool(spec),
            }
        )
    return {
        "where": where(url),
        "runs": entries,
        "read": {
            entry["run"]: {k: v for k, v in entry.items() if k not in DATABASE_KEYS}
            for entry in entries
        },
    }


def _fold(url: str, run: RunDir, found: DatabaseRun, live: bool) -> tuple[RunState, str]:
    """The run's state from its summary (an ended run's, no row after it), or from
    its snapshot and the rows after it (`found.tail`), and how it was read (tail or
    whole); read as `status` reads it when they cannot be taken.

    Raises:
        OSError: the database cannot be read.
        JournalCorruptError: the journal is damaged.
    """
    sealed, end, tail = found.snapshot, found.snapshot_end, found.tail
    if found.summary is not None:  # then no snapshot came: another crw's is read whole
        summed = parse_summary(found.summary)
        if summed is not None:
            return summed, "tail"
        tail = None
    snapshot = parse_snapshot(sealed) if sealed is not None else None
    if tail is not None and (sealed is None or (snapshot is not None and snapshot.end == end)):
        into = snapshot.state if snapshot is not None else None
        if into is not None and not tail:
            return into, "tail"  # no row after the snapshot
        try:
            read = decode(tail, run.journal, after=into.last_seq if into is not None else 0)
        except JournalCorruptError:
            read = None  # read whole below: the damage is reported with its offsets
        if read is not None:
            return (replay(read.rows, into=into) if read.rows or into is None else into), "tail"
    keep_store(run.journal, open_store(url, run.id, run.journal))
    state, read = replay_journal(run.journal, live=live)
    return state, how_read(read)


def database_lines(section: dict[str, Any], now: datetime) -> list[str]:
    """The section for a person: list's table of the database's runs, each with the
    machine it last ran on, its lease, and whether its run directory is here."""
    runs = section["runs"]
    if not runs:
        return [f"no runs in the {section['where']}"]
    extra = [_where_ran(entry) for entry in runs]
    room = max(len(cell) for cell in extra) + 2
    width = shutil.get_terminal_size((80, 24)).columns
    table = fit([cells(entry, now) for entry in runs], max(40, width - room))
    wide = max(len(line) for line in table)
    lines = [f"runs in the {section['where']}:", f"{table[0]:<{wide}}  MACHINE"]
    lines += [f"{line:<{wide}}  {cell}" for line, cell in zip(table[1:], extra, strict=True)]
    return lines


def _where_ran(entry: dict[str, Any]) -> str:
    """The MACHINE cell: the machine, its lease, and whether the run is here."""
    machine = entry["machine"] or "-"
    lease = f"  held until {entry['lease_until']}" if entry["held"] else ""
    here = "" if entry["here"] else "  (no run directory on this machine)"
    return f"{machine}{lease}{here}"
