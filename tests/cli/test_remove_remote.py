"""`crw flow rm RUN --db URL` and `gc --db URL` of a run only the database keeps:
its machine died with its disk, so no directory of it is left anywhere. Refused
while a writer's lease holds it (the lease's one line); otherwise its rows, its
`crw_runs` row, its kept files and its snapshot go. Real `crw` processes on the
throwaway cluster."""

from __future__ import annotations

import shutil
from pathlib import Path

import psycopg
import pytest

from crw.journal.postgres import PostgresJournal
from tests.cli.conftest import Crw
from tests.cli.test_housekeeping import _run
from tests.cli.test_remove_db import ENDED, STARTED, _counts, _flow, _in_database

GONE = dict.fromkeys(("crw_journal", "crw_runs", "crw_run_files", "crw_snapshots"), 0)


def _machine_gone(
    crw: Crw, url: str, run_id: str, monkeypatch: pytest.MonkeyPatch, *, ended: bool = True
) -> None:
    """Run `run_id` in the database, taken last by machine `dead`, whose lease
    lapsed; no directory of it here."""
    run = _in_database(crw, url, run_id, ended=ended)
    _taken_by(url, run.id, "dead", monkeypatch)
    _lapse(url, run_id)
    shutil.rmtree(run.root)


def _taken_by(url: str, run_id: str, machine: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The run taken by a writer of `machine` (this machine's lease let lapse first)."""
    _lapse(url, run_id)
    with monkeypatch.context() as patch:
        patch.setenv("CRW_MACHINE", machine)
        elsewhere = Path("/nonexistent") / run_id / "journal.jsonl"  # its machine's
        PostgresJournal(url, run_id, elsewhere).open_appender().close()


def _lapse(url: str, run_id: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            b"UPDATE crw_runs SET lease_until = now() - interval '1 second' WHERE run = %s",
            (run_id,),
        )


def test_rm_of_a_run_only_the_database_keeps_deletes_its_rows_files_and_snapshot(
    crw: Crw, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No directory of the run here, its writer's lease lapsed: rm --db removes
    every row of it; another run's rows stay."""
    _machine_gone(crw, postgres_url, "r-gone", monkeypatch)
    _in_database(crw, postgres_url, "r-other")
    removed = _flow(crw, "rm", "r-gone", "--db", postgres_url, "--json")
    assert removed.code == 0, removed.stderr
    assert removed.json()["run"] == "r-gone" and removed.json()["rows"] == 5
    assert _counts(postgres_url, "r-gone") == GONE
    assert _counts(postgres_url, "r-other")["crw_journal"] == 2
    again = _flow(crw, "rm", "r-gone", "--db", postgres_url)
    assert again.code == 2 and 'run "r-gone" not found under' in again.stderr


def test_rm_of_a_run_only_the_database_keeps_finds_it_in_crw_db(
    crw: Crw, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As `resume` looks a run up: --db, else $CRW_DB, else the state's default."""
    _machine_gone(crw, postgres_url, "r-env", monkeypatch)
    crw.env["CRW_DB"] = postgres_url
    removed = _flow(crw, "rm", "r-env")
    assert removed.code == 0, removed.stderr
    assert removed.stdout.startswith("removed run r-env from the ")
    assert _counts(postgres_url, "r-env") == GONE


def test_rm_of_a_run_only_the_database_keeps_is_refused_while_a_lease_holds_it(
    crw: Crw, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A live lease (the run goes on on its machine): the lease's one line, nothing
    removed."""
    run = _in_database(crw, postgres_url, "r-live", ended=False)
    _taken_by(postgres_url, run.id, "elsewhere", monkeypatch)
    shutil.rmtree(run.root)
    refused = _flow(crw, "rm", "r-live", "--db", postgres_url)
    assert refused.code == 1
    assert refused.stderr.startswith("crw: error: run r-live is held by machine elsewhere until ")
    assert "it is not removed: remove it on elsewhere, or here once that lease" in refused.stderr
    assert refused.stderr.count("\n") == 1
    assert _counts(postgres_url, "r-live") == {
        "crw_journal": 1, "crw_runs": 1, "crw_run_files": 1, "crw_snapshots": 1,
    }  # fmt: skip


def test_gc_db_removes_the_ended_runs_only_the_database_keeps(
    crw: Crw, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """gc --db: an ended run with no directory here goes with its rows; an open one,
    a held one and one with a directory here (judged by its directory) stay; the
    dry run removes nothing."""
    _machine_gone(crw, postgres_url, "r-old", monkeypatch)
    _machine_gone(crw, postgres_url, "r-open", monkeypatch, ended=False)
    held = _in_database(crw, postgres_url, "r-held")
    _taken_by(postgres_url, held.id, "elsewhere", monkeypatch)
    shutil.rmtree(held.root)
    here = _run(crw, "r-here", STARTED, ENDED)
    assert _flow(crw, "import", here.id, "--db", postgres_url).code == 0
    dry = _flow(crw, "gc", "--ended-before", "2026-11-10", "--db", postgres_url,
                "--dry-run", "--json")  # fmt: skip
    assert dry.code == 0, dry.stderr
    assert [r["run"] for r in dry.json()["removed"]] == ["r-here", "r-old"]
    assert _counts(postgres_url, "r-old")["crw_journal"] == 2
    done = _flow(crw, "gc", "--ended-before", "2026-11-10", "--db", postgres_url, "--json")
    assert done.code == 0, done.stderr
    assert [r["run"] for r in done.json()["removed"]] == ["r-here", "r-old"]
    assert done.json()["removed"][1]["ended_at"] == ENDED[0]
    (skipped,) = done.json()["skipped"]
    assert skipped["run"] == "r-held" and "is held by machine elsewhere" in skipped["reason"]
    assert _counts(postgres_url, "r-old") == GONE
    assert _counts(postgres_url, "r-here") == GONE
    assert _counts(postgres_url, "r-open")["crw_journal"] == 1
    assert _counts(postgres_url, "r-held")["crw_journal"] == 2
    assert not (crw.state / ".database").exists()


def test_gc_db_needs_a_date(crw: Crw, postgres_url: str) -> None:
    refused = _flow(crw, "gc", "--refs", "--db", postgres_url)
    assert refused.code == 2 and "--db names the database whose ended runs" in refused.stderr
