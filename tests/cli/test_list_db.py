"""`crw flow list --db URL` (or $CRW_DB): the runs of a PostgreSQL database too,
each with the machine it last ran on, marked when this machine has no run
directory of it. Real `crw` processes on a throwaway PostgreSQL cluster."""

from __future__ import annotations

import shutil
import zlib
from pathlib import Path

import psycopg
import pytest

from crw.cli.default_db import write_default_db
from crw.cli.read.list_db import DATABASE_KEYS
from crw.journal.log import decode
from crw.journal.pg_runs import database_runs
from crw.journal.postgres import PostgresJournal
from crw.journal.replay import replay
from crw.journal.snapshot import save_snapshot
from crw.journal.stores import store_at
from tests.cli.conftest import Crw
from tests.cli.test_move_journal import _flow, _run


def test_list_names_the_database_runs_their_machine_and_those_not_here(
    crw: Crw, postgres_url: str
) -> None:
    """Two runs moved into the database; one's run directory then
    gone from this machine (it ran on another), whose writer took it last and
    holds its lease: both listed from the database with list's columns, the
    machine named, the one not here marked, live while that machine's lease runs."""
    here, away = _run(crw, "r-here"), _run(crw, "r-away")
    for run in (here, away):
        assert _flow(crw, "import", run.id, "--db", postgres_url).code == 0
    shutil.rmtree(away.root)
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(b"INSERT INTO crw_runs VALUES ('r-away', 3, 'far-box', now() + interval '1h')")

    listed = _flow(crw, "list", "--all", "--db", postgres_url, "--json")
    assert listed.code == 0, listed.stderr
    assert [entry["run"] for entry in listed.json()["runs"]] == ["r-here"]
    runs = {entry["run"]: entry for entry in listed.json()["database"]["runs"]}
    away_entry = {key: runs["r-away"][key] for key in ("run", *DATABASE_KEYS, "state", "live")}
    assert away_entry | {"lease_until": None} == {
        "run": "r-away", "machine": "far-box", "lease_until": None, "held": True,
        "last_seq": 8, "here": False, "state": "ended", "live": True,
    }  # fmt: skip
    assert (runs["r-here"]["machine"], runs["r-here"]["here"]) == (None, True)

    shown = crw("flow", "list", "--all", "--state", str(crw.state),
                env=crw.env | {"CRW_DB": postgres_url})  # fmt: skip
    assert shown.code == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert any(line.startswith("runs in the PostgreSQL database") for line in lines)
    away_line = next(line for line in lines if line.strip().startswith("r-away"))
    assert "far-box  held until 20" in away_line
    assert " ended (completed) " in away_line
    assert away_line.endswith("  (no run directory on this machine)")
    assert "no run directory" not in next(line for line in lines if "r-here  " in line)


def test_list_without_a_database_lists_only_the_state_directory(crw: Crw) -> None:
    """No --db and no CRW_DB: no database section, no connection."""
    _run(crw, "r-file")
    listed = _flow(crw, "list", "--all", "--json")
    assert listed.code == 0, listed.stderr
    assert "database" not in listed.json()


ROWS_KEYS = ("state", "rows_state", "reason", "calls", "tokens", "started_at", "last_at", "live")
"""The columns list reads from a run's rows (the others come from its run.json)."""


@pytest.mark.parametrize("ended", [True, False], ids=["ended", "crashed"])
def test_list_db_shows_the_columns_list_shows_for_the_same_run_on_files(
    crw: Crw, postgres_url: str, ended: bool
) -> None:
    """A run listed from its journal file, then moved into the database with a
    snapshot of its first rows kept there: `list --db` shows every column as
    the file's list did, for the run here (in both sections, read in the
    database's one query) and once its run directory is gone (another machine's),
    the columns its rows give; the state with its reason, calls done/total,
    tokens, started, last row, live; no resume command for a run not here."""
    run = _run(crw, "r-cols")
    if not ended:  # its last batch, the ended row, cut: a run whose process is gone
        lines = run.journal.read_bytes().splitlines(keepends=True)
        run.journal.write_bytes(b"".join(lines[:-1]))
    on_file = _flow(crw, "list", "--all", "--json")
    assert on_file.code == 0, on_file.stderr
    (file_entry,) = on_file.json()["runs"]
    assert file_entry["state"] == ("ended" if ended else "crashed")
    assert _flow(crw, "import", run.id, "--db", postgres_url).code == 0
    _prefix_snapshot(run.journal, rows=4)

    listed = _flow(crw, "list", "--all", "--db", postgres_url, "--json")
    assert listed.code == 0, listed.stderr
    (here,) = listed.json()["runs"]
    (in_db,) = listed.json()["database"]["runs"]
    assert here == file_entry
    assert {k: v for k, v in in_db.items() if k not in DATABASE_KEYS} == file_entry
    assert (in_db["here"], in_db["last_seq"]) == (True, 8 if ended else 7)

    shutil.rmtree(run.root)
    away = _flow(crw, "list", "--all", "--db", postgres_url, "--json")
    assert away.code == 0, away.stderr
    (gone,) = away.json()["database"]["runs"]
    rows_keys = ROWS_KEYS if ended else tuple(k for k in ROWS_KEYS if k != "calls")
    assert {k: gone[k] for k in rows_keys} == {k: file_entry[k] for k in rows_keys}
    assert (gone["here"], gone["read"]) == (False, "tail")
    assert gone["resume"] is None  # it goes on on its machine, not from here
    assert (file_entry["resume"] is None) == ended


def _prefix_snapshot(journal: Path, rows: int) -> None:
    """Keep in the database a snapshot of the run's first `rows` rows (a batch's end)."""
    store = store_at(journal)
    assert isinstance(store, PostgresJournal)
    data = store.read_from(0)
    end = sum(len(line) + 1 for line in data.split(b"\n")[:rows])
    state = replay(decode(data[:end], journal).rows)
    save_snapshot(journal, state, end, zlib.crc32(data[:end]))
    assert store.snapshot_tail()[1] == end


def test_list_says_a_database_run_was_read_from_its_snapshot_and_rows_after_it(
    crw: Crw, postgres_url: str
) -> None:
    """`list` without --db reads a run of the state directory whose journal is in
    the database from the snapshot kept there and the rows after it: `read` says
    `tail`; with no snapshot there every row is read: `whole` (and the ended run's
    read keeps one, so the next is `tail`); a database it cannot reach: not read."""
    run = _run(crw, "r-read")
    assert _flow(crw, "import", run.id, "--db", postgres_url).code == 0
    _prefix_snapshot(run.journal, rows=4)

    def read() -> object:
        listed = _flow(crw, "list", "--all", "--json")
        assert listed.code == 0, listed.stderr
        (entry,) = listed.json()["runs"]
        assert entry["state"] in ("ended", "unreadable"), entry
        return entry["read"]

    assert read() == "tail"
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(b"DELETE FROM crw_snapshots")
    assert read() == "whole"
    assert read() == "tail"
    gone = postgres_url.replace("@/", "@/none_")  # a database that is not there
    run.run_json.write_text(run.run_json.read_text().replace(postgres_url, gone))
    assert read() is None


def test_list_reads_an_ended_database_runs_summary_not_its_snapshot(
    crw: Crw, postgres_url: str
) -> None:
    """An ended run whose snapshot `status` kept in the database, its directory on
    another machine: list's query brings its summary and not its snapshot (which
    holds every call), and list shows the columns the file's list showed, read
    from the summary (`tail`) even with the snapshot's bytes damaged."""
    run = _run(crw, "r-summed")
    on_file = _flow(crw, "list", "--all", "--json")
    (file_entry,) = on_file.json()["runs"]
    assert _flow(crw, "import", run.id, "--db", postgres_url).code == 0
    assert _flow(crw, "status", run.id, "--json").code == 0  # keeps its snapshot
    shutil.rmtree(run.root)

    (found,) = database_runs(postgres_url)
    assert (found.snapshot, found.tail) == (None, b"")
    assert found.summary is not None
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(b"UPDATE crw_snapshots SET snapshot = 'damaged'")
    listed = _flow(crw, "list", "--all", "--db", postgres_url, "--json")
    assert listed.code == 0, listed.stderr
    (entry,) = listed.json()["database"]["runs"]
    assert {k: entry[k] for k in ROWS_KEYS} == {k: file_entry[k] for k in ROWS_KEYS}
    assert entry["read"] == "tail"


def test_list_db_alone_lists_the_database_chosen_as_start_chooses_it(
    crw: Crw, postgres_url: str
) -> None:
    """`list --db` with no URL: $CRW_DB's database, else the state directory's
    default (`crw flow init --db`), as start, import and resume choose one; none
    named: one line saying how to name one, exit 2. `--db URL` still names it."""
    run = _run(crw, "r-alone")
    assert _flow(crw, "import", run.id, "--db", postgres_url).code == 0
    env = {k: v for k, v in crw.env.items() if k != "CRW_DB"}

    def listed(*args: str, environ: dict[str, str]) -> list[str]:
        shown = crw("flow", "list", "--all", "--state", str(crw.state), *args, env=environ)
        assert shown.code == 0, shown.stderr
        return [entry["run"] for entry in shown.json()["database"]["runs"]]

    none = crw("flow", "list", "--state", str(crw.state), "--db", env=env)
    assert none.code == 2 and none.stdout == ""
    assert none.stderr.splitlines() == [
        "crw: error: crw flow list --db names no database: give it one "
        "(--db postgresql://USER@HOST/DB), set CRW_DB, or record the state "
        "directory's with crw flow init --db URL"
    ]
    assert listed("--db", "--json", environ=env | {"CRW_DB": postgres_url}) == ["r-alone"]
    write_default_db(crw.state, postgres_url)
    assert listed("--json", "--db", environ=env) == ["r-alone"]
    assert listed("--db", postgres_url, "--json", environ=env) == ["r-alone"]
