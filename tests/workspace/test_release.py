"""The run's end (`crw.workspace.release.release_run`) on a run without a
repository: its evidence records are released from the rows all the same, and
releasing twice is releasing once."""

from __future__ import annotations

from pathlib import Path

from crw.cli.run.answer import append_row
from crw.engine.run.rundir import RunDir
from crw.engine.run.runspec import RunSpec, WorkflowRef, write_run_spec
from crw.journal.rows import EvidencePlaced, Prepared
from crw.workspace import evidence
from crw.workspace.release import release_run

RUN = "wf-run-1"
CALL = "build.1"
RECORD = {"run": RUN, "call": CALL}


def _run(tmp_path: Path) -> tuple[RunDir, Path]:
    """A run with no repository whose build.1 placed its record under `owner`."""
    run = RunDir(tmp_path / "state" / "flow" / RUN)
    run.create()
    workflow = WorkflowRef(path=str(tmp_path / "wf.toml"), digest="sha256:0")
    write_run_spec(run.run_json, RunSpec(id=RUN, workflow=workflow, backend="session", pool=1))
    owner = tmp_path / "owner"
    append_row(run, Prepared(call=CALL, node="build", role="executor"))
    append_row(
        run,
        EvidencePlaced(call=CALL, evidence_assignment=RECORD, evidence_cwd=str(owner), attempt=1),
    )
    evidence.write_record(evidence.record_path(str(owner), RUN, CALL), RECORD)
    return run, owner


def test_a_run_without_a_repository_releases_its_records_twice_as_once(tmp_path: Path) -> None:
    run, owner = _run(tmp_path)
    release_run(run)
    assert list(owner.iterdir()) == []
    release_run(run)  # a release finished again: nothing left to do, nothing raised
    assert list(owner.iterdir()) == []


def test_a_run_with_no_evidence_cwd_reads_no_row(tmp_path: Path) -> None:
    """`records=False` (the run process of a workflow with no evidence_cwd, whose
    rows name no record): a run without a repository then reads no row, and
    releases nothing."""
    run, owner = _run(tmp_path)
    release_run(run, records=False)
    assert [p.name for p in owner.iterdir()] == [".crw"]
