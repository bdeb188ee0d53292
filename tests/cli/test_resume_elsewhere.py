"""`crw flow resume RUN` on a machine that has no directory of RUN: the run's
directory made from the files the database keeps, or one line saying why it cannot
go on here, with nothing made. Real `crw` processes on the throwaway cluster; the
first machine is this process taking the run as its writer would."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from crw.cli.run import resume_here
from crw.engine.config.workflow import load_workflow
from crw.engine.run.locks import is_held
from crw.engine.run.rundir import RunDir
from crw.engine.run.runspec import RunSpec, WorkflowRef, write_run_spec
from crw.journal.log import encode_batch, encode_body
from crw.journal.pg_machine import LEASE_SECONDS, lease_seconds
from crw.journal.postgres import PostgresJournal
from crw.journal.rows import Started
from tests.cli.conftest import Crw, Result
from tests.cli.test_dispatched import WORKFLOW

AT = "2026-12-06T14:00:00.000000Z"


def _taken_on_a(
    root: Path, url: str, run_id: str, monkeypatch: pytest.MonkeyPatch, **spec: object
) -> RunDir:
    """Run `run_id` started on machine a (its own state directory under `root`), its
    journal in the database, its lease lapsed (a died)."""
    run = RunDir.of(root / "a-state", run_id)
    run.create()
    workflow = Path(str(spec.pop("workflow", WORKFLOW)))
    ref = WorkflowRef(path=str(workflow), digest=load_workflow(WORKFLOW).digest)
    write_run_spec(
        run.run_json,
        RunSpec.model_validate(
            {"id": run_id, "workflow": ref, "backend": "session", "pool": 2}
            | {"journal_db": url}
            | spec
        ),
    )
    monkeypatch.setenv("CRW_MACHINE", "a")
    appender = PostgresJournal(url, run_id, run.journal).open_appender()
    appender.append(encode_batch(1, AT, [encode_body(Started(backend="session"))]), 1)
    appender.close()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(b"UPDATE crw_runs SET lease_until = now() - interval '1 second'")
    return run


def _resume_on_b(crw: Crw, url: str, run: str, *, by_flag: bool = False) -> Result:
    """b's resume of `run`, the database named by $CRW_DB (or by --db)."""
    env = crw.env | {"CRW_MACHINE": "b"} | ({} if by_flag else {"CRW_DB": url})
    db = ("--db", url) if by_flag else ()
    return crw("flow", "resume", run, "--detach", *db, "--state", str(crw.state), env=env)


def test_a_session_run_is_resumed_only_beside_its_owner(
    crw: Crw, tmp_path: Path, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = _taken_on_a(tmp_path, postgres_url, "r-session", monkeypatch, owner="thread-1")
    said = _resume_on_b(crw, postgres_url, run.id, by_flag=True)
    assert said.code == 1
    assert said.stderr == (
        f"crw: error: run {run.id} is a session run: its owner thread thread-1 and its step "
        f"bus are on the machine it ran on; resume it there (crw flow resume {run.id}), since "
        "a session run goes on only beside its owner\n"
    )
    assert not RunDir.of(crw.state, run.id).root.exists()


def test_a_run_whose_workflow_this_machine_lacks_is_refused_naming_it(
    crw: Crw, tmp_path: Path, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    gone = tmp_path / "elsewhere" / "flow.toml"
    run = _taken_on_a(
        tmp_path, postgres_url, "r-app", monkeypatch, backend="app-server", workflow=gone
    )
    said = _resume_on_b(crw, postgres_url, run.id)
    assert said.code == 1
    assert said.stderr.startswith(
        f"crw: error: run {run.id}'s workflow {gone} cannot be read on this machine ("
    )
    assert said.stderr.endswith("at the same path, then resume again\n")
    assert said.stderr.count("\n") == 1
    assert not RunDir.of(crw.state, run.id).root.exists()


def test_a_run_the_database_does_not_keep_is_not_found(crw: Crw, postgres_url: str) -> None:
    said = _resume_on_b(crw, postgres_url, "r-none")
    assert said.code == 2
    assert said.stderr.startswith(f'crw: error: run "r-none" not found under {crw.state}/flow;')


def test_the_lease_is_crw_lease_seconds_else_sixty(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CRW_LEASE_SECONDS", "2.5")
    assert lease_seconds() == 2.5
    for wrong in ("", "soon", "0", "-3", "inf", "nan"):
        monkeypatch.setenv("CRW_LEASE_SECONDS", wrong)
        assert lease_seconds() == LEASE_SECONDS == 60.0


def test_a_run_imported_into_the_database_is_found_by_another_machine(
    crw: Crw, tmp_path: Path, postgres_url: str
) -> None:
    """import keeps the run's files with its rows (run.json naming the database), so
    another machine finds a run no process of it ever took: here a session run,
    refused as such (not `not found`)."""
    (tmp_path / "a-tmp").mkdir()
    a = Crw(tmp_path / "a-state", tmp_path / "a-tmp")
    run = RunDir.of(a.state, "r-imported")
    run.create()
    ref = WorkflowRef(path=str(WORKFLOW), digest=load_workflow(WORKFLOW).digest)
    write_run_spec(run.run_json, RunSpec(id=run.id, workflow=ref, backend="session", pool=2))
    run.journal.write_bytes(encode_batch(1, AT, [encode_body(Started(backend="session"))]))
    moved = a("flow", "import", run.id, "--db", postgres_url, "--state", str(a.state))
    assert moved.code == 0, moved.stderr
    said = _resume_on_b(crw, postgres_url, run.id)
    assert said.code == 1
    assert said.stderr.startswith(f"crw: error: run {run.id} is a session run: ")


def test_the_directory_a_resume_makes_is_locked_until_it_is_in_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The resume makes the run's directory beside its place holding its run lock,
    so that `gc` deletes a `.resuming-` directory only where a crash left it (no
    process holds it); once renamed into place, the lock is let go."""
    run_dir = RunDir.of(tmp_path / "state", "r-make")
    run_dir.root.parent.mkdir(parents=True)
    ref = WorkflowRef(path=str(WORKFLOW), digest=load_workflow(WORKFLOW).digest)
    spec = RunSpec.model_validate(
        {"id": "r-make", "workflow": ref, "backend": "app-server", "pool": 2}
    )
    held: list[tuple[str, bool]] = []

    def spying(path: Path, written: RunSpec) -> None:
        held.append((path.parent.name[:14], is_held(path.parent / run_dir.run_lock.name)))
        write_run_spec(path, written)

    monkeypatch.setattr("crw.cli.run.resume_here.write_run_spec", spying)
    made = resume_here._made(run_dir, {"run.json": b"{}", "inputs/x": b"1"}, spec)
    assert held == [(".resuming-r-ma", True)]
    assert made == run_dir and (made.root / "inputs" / "x").read_bytes() == b"1"
    assert not is_held(made.run_lock)
    assert list(run_dir.root.parent.iterdir()) == [run_dir.root]
