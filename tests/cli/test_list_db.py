"""`crw flow list --db URL` (or $CRW_DB): the runs of a PostgreSQL database too,
each with the machine it last ran on, marked when this machine has no run
directory of it. Real `crw` processes on a throwaway PostgreSQL cluster."""

from __future__ import annotations

import shutil

import psycopg

from tests.cli.conftest import Crw
from tests.cli.test_move_journal import _flow, _run


def test_list_names_the_database_runs_their_machine_and_those_not_here(
    crw: Crw, postgres_url: str
) -> None:
    """Two runs moved into the database; one's run directory then
    gone from this machine (it ran on another), whose writer took it last: both
    listed from the database, the machine named, the one not here marked."""
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
    assert runs["r-away"] | {"lease_until": None} == {
        "run": "r-away", "machine": "far-box", "lease_until": None, "held": True,
        "last_seq": 8, "here": False,
    }  # fmt: skip
    assert (runs["r-here"]["machine"], runs["r-here"]["here"]) == (None, True)

    shown = crw("flow", "list", "--all", "--state", str(crw.state),
                env=crw.env | {"CRW_DB": postgres_url})  # fmt: skip
    assert shown.code == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert any(line.startswith("runs in the PostgreSQL database") for line in lines)
    away_line = next(line for line in lines if line.strip().startswith("r-away"))
    assert "far-box  held until 20" in away_line
    assert away_line.endswith("8 rows  (no run directory on this machine)")
    assert "no run directory" not in next(line for line in lines if "r-here  " in line)


def test_list_without_a_database_lists_only_the_state_directory(crw: Crw) -> None:
    """No --db and no CRW_DB: no database section, no connection."""
    _run(crw, "r-file")
    listed = _flow(crw, "list", "--all", "--json")
    assert listed.code == 0, listed.stderr
    assert "database" not in listed.json()
