"""`crw flow status RUN` and `crw flow show RUN` of a run whose journal is in
PostgreSQL and whose directory is on another machine: read from the database
(its rows, its snapshot, the run.json its start wrote), no `resume` first, no
directory made. Two machines as two state directories on one database, real
`crw` processes on the throwaway cluster."""

from __future__ import annotations

from pathlib import Path

import psycopg

from crw.engine.run.rundir import RunDir
from tests.cli.conftest import Crw, Result
from tests.cli.test_move_journal import _flow, _run

MACHINE_ONLY = ("run_dir", "elsewhere", "todo")
"""The members of status that say where the run's directory is."""


def _on_b(crw: Crw, b_state: Path, url: str | None, *args: str) -> Result:
    """`crw flow ARGS` on machine b: its own state directory, the database named
    by $CRW_DB (None: unset)."""
    env = {k: v for k, v in crw.env.items() if k != "CRW_DB"} | {"CRW_MACHINE": "b"}
    if url is not None:
        env["CRW_DB"] = url
    return crw("flow", *args, "--state", str(b_state), env=env)


def _on_a(crw: Crw, postgres_url: str, run_id: str) -> RunDir:
    """An ended run on machine a (this test's state directory), moved into the
    database."""
    run = _run(crw, run_id)
    assert _flow(crw, "import", run.id, "--db", postgres_url).code == 0
    return run


def test_status_and_show_read_a_run_only_the_database_keeps(
    crw: Crw, tmp_path: Path, postgres_url: str
) -> None:
    """Machine b, which has no directory of a's run, shows its status and its rows
    as a shows them, read from the database, and makes no directory of it; the
    status says it was read from there and where the run last ran."""
    run = _on_a(crw, postgres_url, "r-away")
    on_a = _flow(crw, "status", run.id, "--json")
    assert on_a.code == 0, on_a.stderr
    rows_on_a = _flow(crw, "show", run.id, "--json")
    b_state = tmp_path / "b-state"

    on_b = _on_b(crw, b_state, postgres_url, "status", run.id, "--json")
    assert on_b.code == 0, on_b.stderr
    status = on_b.json()
    assert {k: v for k, v in status.items() if k not in MACHINE_ONLY} == {
        k: v for k, v in on_a.json().items() if k not in MACHINE_ONLY
    }
    assert (status["state"], status["run_dir"], status["live"]) == ("ended", None, False)
    assert status["elsewhere"] == {"machine": None, "lease_until": None, "held": False}
    assert on_a.json()["elsewhere"] is None
    shown = _on_b(crw, b_state, postgres_url, "show", run.id, "--json")
    assert (shown.code, shown.stdout) == (0, rows_on_a.stdout), shown.stderr
    person = _on_b(crw, b_state, postgres_url, "status", run.id)
    assert "  read from the database: it last ran on machine -; no run directory" in person.stdout
    assert not RunDir.of(b_state, run.id).root.exists()


def test_a_run_another_machine_holds_is_live_there(
    crw: Crw, tmp_path: Path, postgres_url: str
) -> None:
    """A run whose last rows leave it running and whose writer on machine a holds
    its lease: b's status shows it running (live on a), not crashed, naming a."""
    run = _run(crw, "r-held")
    lines = run.journal.read_bytes().splitlines(keepends=True)
    run.journal.write_bytes(b"".join(lines[:-1]))  # no ended row: still running
    assert _flow(crw, "import", run.id, "--db", postgres_url).code == 0
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(b"INSERT INTO crw_runs VALUES ('r-held', 2, 'a', now() + interval '1h')")

    on_b = _on_b(crw, tmp_path / "b-state", postgres_url, "status", run.id, "--json")
    assert on_b.code == 0, on_b.stderr
    status = on_b.json()
    assert (status["state"], status["live"], status["holder_pid"]) == ("running", True, None)
    assert status["elsewhere"]["machine"] == "a" and status["elsewhere"]["held"] is True


def test_a_run_in_no_database_nor_here_is_not_found_as_before(
    crw: Crw, tmp_path: Path, postgres_url: str
) -> None:
    """b without $CRW_DB (nor a default database) does not look in any database;
    with it, a run id the database has no row of is not found, as ever."""
    run = _on_a(crw, postgres_url, "r-where")
    b_state = tmp_path / "b-state"
    for url, run_id in ((None, run.id), (postgres_url, "r-nowhere")):
        said = _on_b(crw, b_state, url, "status", run_id)
        assert said.code == 2  # bad input
        assert said.stderr.startswith(f'crw: error: run "{run_id}" not found under '), said.stderr


def test_show_follow_of_a_run_only_the_database_keeps_stops_as_here(
    crw: Crw, tmp_path: Path, postgres_url: str
) -> None:
    """`show --follow` on b of a's run: an ended run's rows, then exit 0; a run
    whose rows leave it running and whose lease lapsed (a died): its rows, then
    exit 1 with the line saying no process runs it."""
    ended = _on_a(crw, postgres_url, "r-follow-ended")
    cut = _run(crw, "r-follow-cut")
    lines = cut.journal.read_bytes().splitlines(keepends=True)
    cut.journal.write_bytes(b"".join(lines[:-1]))
    assert _flow(crw, "import", cut.id, "--db", postgres_url).code == 0
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(b"INSERT INTO crw_runs VALUES ('r-follow-cut', 2, 'a', now() - interval '1s')")
    b_state = tmp_path / "b-state"

    done = _on_b(crw, b_state, postgres_url, "show", ended.id, "--follow", "--json")
    assert done.code == 0, done.stderr
    assert len(done.stdout.splitlines()) == 8
    stopped = _on_b(crw, b_state, postgres_url, "show", cut.id, "--follow", "--json")
    assert stopped.code == 1
    assert len(stopped.stdout.splitlines()) == 7
    assert f"crw: no process runs run {cut.id} (its rows leave it running)" in stopped.stderr
