"""A run process killed right after an executor's completed and crw_commit rows
are durable, before any ref moved, and resumed: the whole run process
(`run_process`) in process on the simulated host, its repository a tmp git repo."""

from __future__ import annotations

from pathlib import Path

import pygit2
import pytest
from trio.testing import MockClock

from crw.actors import run as run_module
from crw.workspace import proof, refs
from tests.actors.test_run_faults import session_run
from tests.actors.test_session_resume import KillPoint
from tests.actors.test_session_run import RUN_ID
from tests.workspace.gitrepo import make_repo

SCRIPTS = [
    {"match": {"marker": "build.1/*"}, "behaviour": {"writes": {"fix.go": "f\n"}, "commit": "fix"}}
]


@pytest.mark.parametrize("kill", ["crw_commit", "turn_started"])
async def test_a_killed_run_resumes_to_the_same_refs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, autojump_clock: MockClock, kill: str
) -> None:
    """spec: GEN-7, HARV-49, HARV-51, HARV-54, HARV-55"""
    repo = make_repo(tmp_path / "repo", {"main.go": "package main\n"})
    head = str(repo.head.target)
    async with session_run(tmp_path, monkeypatch, SCRIPTS) as (run, _links, _sim):
        run.spec = run.spec.model_copy(update={"repository": str(repo.workdir), "head": head})
        point = KillPoint(kill, "build.1")
        monkeypatch.setattr(run_module, "crash_hook", lambda _env: point.after_commit)
        with point.scope:
            await run.process()
        rows = run.rows()
        stray = f"refs/crw/flow/{RUN_ID}/stray/build/a1-build.1"
        node = f"refs/crw/flow/{RUN_ID}/nodes/build"
        if kill == "crw_commit":  # the rows are durable, no ref moved yet
            assert rows[-1]["row"] == "crw_commit" and rows[-2]["row"] == "completed"
            assert refs.read(repo, stray) is None and refs.read(repo, node) is None
        monkeypatch.setattr(run_module, "crash_hook", lambda _env: None)
        state = await run.process()
        rows = run.rows()
    assert state == "ended"
    (made,) = [r for r in rows if r["row"] == "crw_commit"]
    (done,) = [r for r in rows if r["row"] == "completed" and r["call"] == "build.1"]
    assert refs.read(repo, stray) == done["executor_head_moved"]["head"]
    assert refs.read(repo, node) == made["commit"]
    # the run's end released the worktree, and its branch, which held no commit of its own
    assert not (run.dir.calls / "build.1").exists()
    assert repo.references.get(f"refs/heads/crw/{RUN_ID}/build.1") is None
    assert not [r for r in rows if r["row"] == "held"]
    proved = proof.derive(rows, proof.snapshot(repo, rows))
    assert [(p.call, p.state) for p in proved] == [("build.1", done["executor_head_moved"]["head"])]


async def test_a_resumed_run_holds_an_executor_whose_node_branch_was_moved(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, autojump_clock: MockClock
) -> None:
    """spec: GEN-7, HARV-55"""
    repo = make_repo(tmp_path / "repo", {"main.go": "package main\n"})
    head = str(repo.head.target)
    async with session_run(tmp_path, monkeypatch, SCRIPTS) as (run, _links, _sim):
        run.spec = run.spec.model_copy(update={"repository": str(repo.workdir), "head": head})
        point = KillPoint("turn_started", "review.1")
        monkeypatch.setattr(run_module, "crash_hook", lambda _env: point.after_commit)
        with point.scope:
            await run.process()
        node = f"refs/crw/flow/{RUN_ID}/nodes/build"
        (made,) = [r for r in run.rows() if r["row"] == "crw_commit"]
        assert refs.read(repo, node) == made["commit"]
        repo.references.create(node, pygit2.Oid(hex=head), force=True)  # behind the run's back
        monkeypatch.setattr(run_module, "crash_hook", lambda _env: None)
        state = await run.process()
        rows = run.rows()
    (held,) = [r for r in rows if r["row"] == "held" and r["call"] == "build.1"]
    assert held["reason"] == "effect_proof_mismatch" and node in held["error"]
    assert rows.index(held) > rows.index(made)
    assert refs.read(repo, node) == head  # the run moved nothing back
    # the run waits for a decision on the held call, and runs nothing that needs it
    assert state == "waiting_decision" and rows[-1] == held
