"""`crw flow init --db URL`: the database set up (server checked, tables made, the
role's rights checked) and recorded as the state directory's default, which
`start` then takes without --db; a bad URL, a database that is down and a role
that lacks a right are each one line, and record nothing. Real processes on the
throwaway PostgreSQL cluster (tests/postgres.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import psycopg

from crw.journal.postgres import PostgresJournal
from tests.cli.conftest import Crw, Result
from tests.cli.test_init import WORKFLOW, _sim

TABLES = ["crw_journal", "crw_run_files", "crw_runs", "crw_snapshots"]
RIGHTS = "SELECT, INSERT, UPDATE, DELETE"


def _init(crw: Crw, *args: str) -> Result:
    return crw("flow", "init", "--state", str(crw.state), *args)


def _tables(url: str) -> list[str]:
    with psycopg.connect(url) as conn:
        found = conn.execute(
            b"SELECT tablename FROM pg_tables WHERE tablename LIKE 'crw_%' ORDER BY 1"
        ).fetchall()
    return [str(name) for (name,) in found]


def test_init_db_sets_the_database_up_once_and_start_keeps_its_journal_there(
    crw: Crw, tmp_path: Path, postgres_url: str
) -> None:
    """The tables made, the server's facts reported, the URL recorded; a second
    init (the role store kept) changes nothing; a start with neither --db nor
    $CRW_DB keeps its journal in the recorded database."""
    with _sim(tmp_path) as (host, owner):
        first = _init(crw, "--host", host, "--db", postgres_url, "--json")
        assert first.code == 0, first.stderr
        db = first.json()["db"]
        assert db["synchronous_commit"] == "on" and db["fsync"] is True
        assert db["server_version"].split(".")[0].isdigit()
        assert db["default"] == str(crw.state / "db.toml")
        assert _tables(postgres_url) == TABLES
        again = _init(crw, "--host", host, "--db", postgres_url)
        assert again.code == 0, again.stderr
        assert again.stdout.splitlines()[-1] == (
            f"kept the role store {crw.state / 'roles.toml'} (pass --force to write it anew)"
        )
        assert "tables crw_journal, crw_runs, crw_run_files, crw_snapshots ready" in again.stdout
        assert _tables(postgres_url) == TABLES
        started = crw.start(WORKFLOW, "--host", host, "--owner", owner)
        assert started.code == 0, started.stderr
        run_json = Path(started.json()["run_dir"]) / "run.json"
        assert json.loads(run_json.read_text())["journal_db"] == postgres_url


def test_init_db_refuses_a_url_that_is_not_postgresql_and_records_nothing(crw: Crw) -> None:
    said = _init(crw, "--db", "mysql://x/y")
    assert said.code == 2
    assert said.stderr == (
        "crw: error: --db 'mysql://x/y' is not a PostgreSQL URL; give "
        "postgresql://USER@HOST/DATABASE (or leave --db and CRW_DB unset for the journal file)\n"
    )
    assert not (crw.state / "db.toml").exists() and not (crw.state / "roles.toml").exists()


def test_init_db_of_a_database_that_is_down_is_one_line_and_records_nothing(
    crw: Crw, tmp_path: Path
) -> None:
    down = f"postgresql://crw@/crw?host={tmp_path}&port=1"
    said = _init(crw, "--db", down)
    assert said.code == 1
    assert said.stderr.startswith(
        f"crw: error: could not connect to the PostgreSQL database crw on {tmp_path}: "
    )
    assert said.stderr.endswith(
        "; start the database, or fix the URL (user, host, port, database), then run "
        "crw flow init --db again\n"
    )
    assert said.stderr.count("\n") == 1
    assert not (crw.state / "db.toml").exists() and not (crw.state / "roles.toml").exists()


def test_init_db_as_a_role_that_may_not_create_or_use_the_tables_is_refused(
    crw: Crw, postgres_url: str
) -> None:
    """A role without CREATE on the schema: refused naming the right and who can
    grant it; once the owner made the tables, a role without rights on them is
    refused naming the GRANT."""
    role = f"nc{os.getpid()}"
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f"DROP ROLE IF EXISTS {role}".encode())
        conn.execute(f"CREATE ROLE {role} LOGIN".encode())
    as_role = postgres_url.replace("postgresql://crw@", f"postgresql://{role}@")
    said = _init(crw, "--db", as_role)
    assert said.code == 1, said.stdout
    assert (
        "the role of the URL may not create the journal's tables in the PostgreSQL" in said.stderr
    )
    assert said.stderr.count("\n") == 1 and "GRANT CREATE ON SCHEMA public" in said.stderr
    assert _tables(postgres_url) == []
    made = _init(crw, "--db", postgres_url, "--host", "unix:/nonexistent")
    assert made.code == 1  # the host cannot be asked: the tables are made all the same
    assert _tables(postgres_url) == TABLES
    said = _init(crw, "--db", as_role)
    assert said.code == 1
    assert said.stderr == (
        "crw: error: the role of the URL may not use crw_journal, crw_runs, crw_run_files, "
        "crw_snapshots in "
        f"the PostgreSQL database {postgres_url.split('/')[3].split('?')[0]} on "
        f"{postgres_url.split('host=')[1].split('&')[0]}; GRANT SELECT, INSERT, UPDATE, DELETE "
        "ON crw_journal, crw_runs, crw_run_files, crw_snapshots TO the role, "
        "then run crw flow init --db again\n"
    )
    assert not (crw.state / "db.toml").exists()
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f"GRANT {RIGHTS} ON {', '.join(TABLES)} TO {role}".encode())
    crw.state.mkdir(parents=True, exist_ok=True)
    (crw.state / "roles.toml").write_text("")  # a store there: init --db keeps it
    granted = _init(crw, "--db", as_role)  # it may not create tables, nor need to
    assert granted.code == 0, granted.stderr
    assert (crw.state / "db.toml").read_text() == f"journal_db = {json.dumps(as_role)}\n"
    PostgresJournal(as_role, "r", crw.state / "r" / "journal.jsonl").open_appender().close()
