"""`crw flow rm` and `gc` of a run whose journal is in PostgreSQL: the run's rows,
its `crw_runs` row and its kept files go in one transaction, after its directory is
renamed out of the way and before that directory is deleted; a run another
machine's writer holds is refused. Real `crw` processes on the throwaway cluster."""

from __future__ import annotations

import json

import psycopg
import pytest

from crw.engine.run.locks import run_lock
from crw.engine.run.rundir import RunDir
from crw.journal.postgres import PostgresJournal
from crw.journal.rows import Ended, RowModel, Started
from tests.cli.conftest import Crw, Result
from tests.cli.test_housekeeping import _run

STARTED: tuple[str, list[RowModel]] = ("2026-11-01T08:00:00Z", [Started(backend="session")])
ENDED: tuple[str, list[RowModel]] = ("2026-11-02T09:00:00Z", [Ended(status="completed")])


def _flow(crw: Crw, *args: str) -> Result:
    return crw("flow", *args, "--state", str(crw.state))


def _counts(url: str, run: str) -> dict[str, int]:
    with psycopg.connect(url) as conn:
        return {
            table: int(
                conn.execute(  # type: ignore[index]
                    f"SELECT count(*) FROM {table} WHERE run = %s".encode(), (run,)
                ).fetchone()[0]
            )
            for table in ("crw_journal", "crw_runs", "crw_run_files", "crw_snapshots")
        }


def _in_database(crw: Crw, url: str, run_id: str, *, ended: bool = True) -> RunDir:
    """An ended run moved into the database, then taken by a writer of this machine
    (its crw_runs row and kept files there, as after any run process)."""
    run = _run(crw, run_id, STARTED, *([ENDED] if ended else []))
    moved = _flow(crw, "import", run_id, "--db", url)
    assert moved.code == 0, moved.stderr
    PostgresJournal(url, run_id, run.journal).open_appender().close()
    assert _counts(url, run_id) == {
        "crw_journal": 2 if ended else 1,
        "crw_runs": 1,
        "crw_run_files": 1,
        "crw_snapshots": 0,
    }
    with psycopg.connect(url) as conn:  # a reader kept its replay there
        conn.execute(b"INSERT INTO crw_snapshots VALUES (%s, 1, 0, '')", (run_id,))
    return run


def test_rm_of_a_run_in_the_database_deletes_its_rows_lease_and_files(
    crw: Crw, postgres_url: str
) -> None:
    """rm: the directory and every row of the run in the database gone; another run's
    rows stay."""
    run = _in_database(crw, postgres_url, "r-rm")
    _in_database(crw, postgres_url, "r-other")
    removed = _flow(crw, "rm", run.id)
    assert removed.code == 0, removed.stderr
    assert not run.root.exists()
    assert _counts(postgres_url, run.id) == dict.fromkeys(
        ("crw_journal", "crw_runs", "crw_run_files", "crw_snapshots"), 0
    )
    assert _counts(postgres_url, "r-other")["crw_journal"] == 2


def test_rm_of_a_run_another_machine_holds_is_refused_and_changes_nothing(
    crw: Crw, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A live lease of another machine's writer: one line naming it, nothing removed."""
    run = _run(crw, "r-held", STARTED)
    assert _flow(crw, "import", run.id, "--db", postgres_url).code == 0
    monkeypatch.setenv("CRW_MACHINE", "elsewhere")
    PostgresJournal(postgres_url, run.id, run.journal).open_appender().close()
    refused = _flow(crw, "rm", run.id)
    assert refused.code == 1
    assert refused.stderr.startswith(
        f"crw: error: run {run.id} is held by machine elsewhere until "
    )
    assert "it is not removed: remove it on elsewhere, or here once that lease" in refused.stderr
    assert refused.stderr.count("\n") == 1
    assert run.run_json.is_file()
    assert _counts(postgres_url, run.id) == {
        "crw_journal": 1, "crw_runs": 1, "crw_run_files": 1, "crw_snapshots": 0,
    }  # fmt: skip


def test_rm_of_a_stale_copy_of_a_run_another_machine_took_keeps_its_rows(
    crw: Crw, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another machine took the run last (its lease lapsed since): this machine's
    directory is a stale copy; rm removes it and leaves the run's rows, saying so."""
    run = _run(crw, "r-moved", STARTED)
    assert _flow(crw, "import", run.id, "--db", postgres_url).code == 0
    monkeypatch.setenv("CRW_MACHINE", "elsewhere")
    PostgresJournal(postgres_url, run.id, run.journal).open_appender().close()
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(b"UPDATE crw_runs SET lease_until = now() - interval '1 second'")
    removed = _flow(crw, "rm", run.id, "--json")
    assert removed.code == 0, removed.stderr
    assert removed.json()["rows_kept"] == (
        "its rows stay in the database: machine elsewhere took the run last, remove it there"
    )
    assert not run.root.exists()
    assert _counts(postgres_url, run.id) == {
        "crw_journal": 1, "crw_runs": 1, "crw_run_files": 1, "crw_snapshots": 0,
    }  # fmt: skip


def test_gc_removes_an_ended_run_of_the_database_with_its_rows(crw: Crw, postgres_url: str) -> None:
    """gc reads the ended row's time from the database (the journal file is empty)
    and removes the run's directory and rows; an open run stays with its rows."""
    run = _in_database(crw, postgres_url, "r-gc")
    kept = _in_database(crw, postgres_url, "r-open", ended=False)
    assert run.journal.stat().st_size == 0
    done = _flow(crw, "gc", "--ended-before", "2026-11-10", "--json")
    assert done.code == 0, done.stderr
    assert [r["run"] for r in done.json()["removed"]] == [run.id]
    assert done.json()["removed"][0]["ended_at"] == ENDED[0]
    assert not run.root.exists() and kept.root.exists()
    assert _counts(postgres_url, run.id) == dict.fromkeys(
        ("crw_journal", "crw_runs", "crw_run_files", "crw_snapshots"), 0
    )
    assert _counts(postgres_url, kept.id)["crw_journal"] == 1


def test_gc_finishes_a_removal_cut_short_after_its_directory_was_set_aside(
    crw: Crw, postgres_url: str
) -> None:
    """A crash after rm renamed the directory (the intent) and before the rows went:
    the next gc deletes the rows its run.json names, then the directory."""
    run = _in_database(crw, postgres_url, "r-cut")
    aside = run.root.with_name(".removed-r-cut-0a1b2c3d")
    run.root.rename(aside)
    assert json.loads((aside / "run.json").read_text())["journal_db"] == postgres_url
    done = _flow(crw, "gc", "--ended-before", "2000-01-01")
    assert done.code == 0, done.stderr
    assert not aside.exists()
    assert _counts(postgres_url, run.id) == dict.fromkeys(
        ("crw_journal", "crw_runs", "crw_run_files", "crw_snapshots"), 0
    )


def test_gc_deletes_a_directory_a_resume_left_half_made_and_keeps_the_run_rows(
    crw: Crw, postgres_url: str
) -> None:
    """A resume on another machine makes the run's directory beside its place
    (`.resuming-RUN-…`, its run lock held) and renames it into place once whole:
    a crash between leaves it. gc deletes it, and says so, where no resume holds
    it, and never the run's rows (its run.json names them: the run is not this
    directory's); one a resume is making (its run lock held) is left, said why."""
    run = _in_database(crw, postgres_url, "r-left")
    left = run.root.with_name(".resuming-r-left-0a1b2c3d")
    run.root.rename(left)
    making = RunDir(run.root.with_name(".resuming-r-left-4e5f6a7b"))
    making.create()
    lock = run_lock(making)
    try:
        done = _flow(crw, "gc", "--ended-before", "2100-01-01", "--json")
    finally:
        lock.release()
    assert done.code == 0, done.stderr
    assert not left.exists() and making.root.exists()
    assert _counts(postgres_url, run.id)["crw_journal"] == 2
    assert done.json()["removed"] == []
    (gone, held) = sorted(done.json()["resumes_left"], key=lambda entry: entry["dir"])
    assert gone == {"dir": str(left), "run": "r-left", "removed": True}
    assert held["run"] == "r-left" and "being made by a resume of run r-left" in held["reason"]

    again = _flow(crw, "gc", "--ended-before", "2100-01-01")
    assert again.code == 0, again.stderr
    assert not making.root.exists()
    assert again.stdout.splitlines()[0] == (
        f"removed {making.root}: a resume of run r-left left it half-made "
        "(its rows stay in the database; resume the run again to go on)"
    )
