"""The placer on the App Server backend: each call's thread works in its P (the
thread's cwd), the fix round's fork in its build call's worktree."""

from __future__ import annotations

import functools
import shutil
from pathlib import Path

import pygit2
import pytest
from trio.testing import MockClock

import tests.actors.test_app_server_resume as app_resume
from crw.actors.app_server_context import CallContext
from crw.host.sim.server import open_sim_host
from crw.workspace.commit import node_tip
from crw.workspace.placer import Placer
from tests.actors.test_app_server_resume import kill_after
from tests.actors.test_app_server_review import one, reviewed
from tests.workspace.gitrepo import make_repo
from tests.workspace.test_placer_run import allocations_in_loop


def placed(tmp_path: Path, run_dir: Path, monkeypatch: pytest.MonkeyPatch) -> pygit2.Repository:
    repo = make_repo(tmp_path / "repo", {"parser.py": "def parse(): ...\n"})
    root = str(repo.workdir).rstrip("/")
    placer = Placer("run-1", root, str(repo.head.target), run_dir / "calls")
    monkeypatch.setattr(app_resume, "CallContext", functools.partial(CallContext, placer=placer))
    return repo


async def test_app_server_calls_work_in_their_worktree_and_checkouts(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: STEP-1, STEP-3, STEP-4, STEP-6, ATT-15"""
    async with open_sim_host(tmp_path / "home") as sim:
        made = await reviewed(sim, tmp_path)
        repo = placed(tmp_path, made.run_dir, monkeypatch)
        assert await made.process() == "ended"
        rows = made.rows()
        cwds = {call: made.thread(call).cwd for call in ("build.1", "build.2", "build.3")}
    head = str(repo.head.target)
    build = one(rows, "build.1", "prepared")["allocation"]
    assert build == {
        "workspace": str(made.run_dir / "calls" / "build.1"),
        "kind": "worktree",
        "start_commit": head,
        "branch": "refs/heads/crw/run-1/build.1",
    }
    assert one(rows, "build.3", "prepared")["allocation"] == build  # the fix shares it
    review = one(rows, "build.2", "prepared")["allocation"]
    assert (review["kind"], review["start_commit"]) == ("checkout", head)
    assert one(rows, "ship.1", "prepared")["allocation"]["kind"] == "checkout"
    # P is the thread's cwd on the host, and the thread_started row's
    assert cwds == {
        "build.1": build["workspace"],
        "build.2": review["workspace"],
        "build.3": build["workspace"],
    }
    for call in ("build.1", "build.3"):
        assert one(rows, call, "thread_started")["cwd"] == build["workspace"]
    tree = pygit2.Repository(build["workspace"])
    assert (tree.head.name, str(tree.head.target)) == (build["branch"], node_tip(rows, "build"))


async def test_a_killed_app_server_process_restores_the_worktree_it_left_unmade(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: STEP-2, ATT-15"""
    async with open_sim_host(tmp_path / "home") as sim:
        made = await reviewed(sim, tmp_path)
        placed(tmp_path, made.run_dir, monkeypatch)
        assert await made.process(kill_after("step_published")) is None
        build = one(made.rows(), "build.1", "prepared")["allocation"]
        shutil.rmtree(build["workspace"], ignore_errors=True)
        assert await made.process() == "ended"
        rows = made.rows()
    assert [r["row"] for r in rows if r.get("call") == "build.1"].count("prepared") == 1
    tree = pygit2.Repository(build["workspace"])
    assert (tree.head.name, str(tree.head.target)) == (build["branch"], node_tip(rows, "build"))


async def test_only_a_call_that_reads_its_node_ref_is_allocated_in_a_worker_thread(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The placer's decision takes microseconds, a hop to a worker thread and back
    more: only an executor's allocation, which reads its node ref from the
    repository, is made off the run's thread."""
    in_loop = allocations_in_loop(monkeypatch)
    async with open_sim_host(tmp_path / "home") as sim:
        made = await reviewed(sim, tmp_path)
        placed(tmp_path, made.run_dir, monkeypatch)
        assert await made.process() == "ended"
    assert in_loop == {"build.1": False, "build.2": True, "build.4": True, "ship.1": True}
