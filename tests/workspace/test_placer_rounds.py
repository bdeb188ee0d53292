"""The placer across attempts, fix rounds and a resumed process, on the simulated
host with a scripted owner (the session backend's harness, with the run's placer)."""

from __future__ import annotations

import functools
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pygit2
import pytest
import trio
from trio.testing import MockClock

import tests.actors.test_session_run as session_run
from crw.actors.journal_writer import open_journal_writer
from crw.actors.session_context import SessionContext
from crw.journal.rows import RowModel
from crw.workspace import commit
from crw.workspace.placer import Placer
from tests.actors.test_review_rounds import a_resumed_process, reviewed, run_until
from tests.actors.test_session_lost import lost_owner
from tests.actors.test_session_resume import remembering, run_until_killed
from tests.actors.test_session_run import RUN_ID, Harness, harness, kinds
from tests.actors.test_supersede import restart
from tests.workspace.gitrepo import make_repo

Rows = list[dict[str, Any]]


def placed(h: Harness, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> pygit2.Repository:
    """A repository for the harness's run, whose contexts get the run's placer."""
    repo = make_repo(tmp_path / "repo", {"parser.py": "def parse(): ...\n"})
    root = str(repo.workdir).rstrip("/")
    placer = Placer(RUN_ID, root, str(repo.head.target), h.run.calls)
    monkeypatch.setattr(
        session_run, "SessionContext", functools.partial(SessionContext, placer=placer)
    )
    return repo


def one(rows: Rows, call: str, kind: str) -> dict[str, Any]:
    found = [r for r in rows if r.get("call") == call and r["row"] == kind]
    assert len(found) == 1, (call, kind, found)
    return found[0]


def crw_head(rows: Rows, allocation: dict[str, Any]) -> tuple[str, str]:
    """Where an executor's worktree ends: on its branch, at the node's last
    crw.commit (the start when the node has none)."""
    return allocation["branch"], commit.node_tip(rows, "build") or allocation["start_commit"]


def worktree_head(path: str) -> tuple[str | None, str]:
    tree = pygit2.Repository(path)
    return (None if tree.head_is_detached else tree.head.name), str(tree.head.target)


async def test_a_lost_attempts_next_spawn_works_in_the_same_worktree(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: ATT-15, STEP-3"""
    async with harness(tmp_path) as h:
        repo = placed(h, tmp_path, monkeypatch)
        lost_owner(h)
        await h.script({"marker": "build.1/t1-a1"}, vanish="notLoaded")
        # The first attempt leaves an edit in P; the loss must not retire P.

        def leaving_an_edit(*args: Any, **kwargs: Any) -> Any:
            def after(rows: Sequence[RowModel]) -> None:
                for row in rows:
                    if getattr(row, "row", None) == "session_attempt_lost":
                        (h.run.calls / "build.1" / "parser.py").write_text("edited\n")

            return open_journal_writer(*args, **kwargs, after_commit=after)

        monkeypatch.setattr(session_run, "open_journal_writer", leaving_an_edit)
        state, rows = await h.go()
    assert state == "ended"
    assert kinds(rows, "build.1").count("prepared") == 1
    assert "session_attempt_lost" in kinds(rows, "build.1")
    allocation = one(rows, "build.1", "prepared")["allocation"]
    assert allocation["kind"] == "worktree"
    steps = [r for r in rows if r["row"] == "step_published" and r["call"] == "build.1"]
    assert [s["attempt"] for s in steps] == [1, 2]
    assert {s["workspace"] for s in steps} == {allocation["workspace"]}
    started = [r for r in rows if r["row"] == "thread_started" and r["call"] == "build.1"]
    assert [s["cwd"] for s in started] == [allocation["workspace"]] * 2
    assert (Path(allocation["workspace"]) / "parser.py").read_text() == "edited\n"
    assert worktree_head(allocation["workspace"]) == crw_head(rows, allocation)
    assert sum(name.endswith("-build.1") for name in repo.list_worktrees()) == 1


async def test_fix_rounds_share_the_build_calls_allocation(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: ATT-15, STEP-3, STEP-4, STEP-6"""
    async with harness(tmp_path) as h:
        placed(h, tmp_path, monkeypatch)
        await reviewed(tmp_path, h)
        state, rows = await h.go()
    assert state == "ended" and rows[-1]["status"] == "completed"
    build = one(rows, "build.1", "prepared")["allocation"]
    fix = one(rows, "build.3", "prepared")
    assert fix["resume"] == "build.1" and fix["allocation"] == build
    assert build["kind"] == "worktree"
    for call in ("build.1", "build.3"):
        assert one(rows, call, "step_published")["workspace"] == build["workspace"]
        assert one(rows, call, "thread_started")["cwd"] == build["workspace"]
    for review in ("build.2", "build.4"):
        allocation = one(rows, review, "prepared")["allocation"]
        assert allocation["kind"] == "checkout"
        assert allocation["workspace"] == str(h.run.calls / review)
        assert worktree_head(allocation["workspace"]) == (None, build["start_commit"])
        # the reviewer reads the build's P, which its task names
        packet = one(rows, review, "step_published")["packet"]
        assert build["workspace"] in await trio.Path(packet).read_text()


@pytest.mark.parametrize(
    ("kind", "call"),
    [("prepared", "build.1"), ("prepared", "build.3"), ("thread_started", "build.3")],
)
async def test_a_resumed_process_restores_a_p_that_is_missing(
    tmp_path: Path,
    autojump_clock: MockClock,
    monkeypatch: pytest.MonkeyPatch,
    kind: str,
    call: str,
) -> None:
    """A process killed right after the prepared row (before P is made), or one
    whose P was deleted since: the resumed process makes P again, at the same path
    and the allocation's start, and the run ends as an undisturbed one.

    spec: STEP-2, ATT-15"""
    async with harness(tmp_path) as h:
        repo = placed(h, tmp_path, monkeypatch)
        await reviewed(tmp_path, h)
        owner = remembering(h)
        dead = await run_until(h, monkeypatch, kind, call)
        build = one(dead, "build.1", "prepared")["allocation"]
        path = Path(build["workspace"])
        shutil.rmtree(path, ignore_errors=True)  # P deleted while no process ran
        await a_resumed_process(h)
        state, rows = await h.go()
    assert state == "ended" and rows[-1]["status"] == "completed"
    for node_call in ("build.1", "build.2", "build.3", "build.4"):
        assert kinds(rows, node_call).count("prepared") == 1, node_call
    assert len(owner.spawned) == 5
    assert one(rows, "build.3", "prepared")["allocation"] == build
    assert worktree_head(str(path)) == crw_head(rows, build)
    assert (path / "parser.py").read_text() == "def parse(): ...\n"
    assert sum(name.endswith("-build.1") for name in repo.list_worktrees()) == 1


async def test_a_superseded_call_releases_its_worktree_and_the_new_call_gets_its_own(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: ATT-15, STEP-3"""
    async with harness(tmp_path) as h:
        repo = placed(h, tmp_path, monkeypatch)
        remembering(h)
        await h.script({"marker": "build.1/t1-a1"}, hang=True)
        dead = await run_until_killed(h, monkeypatch, "turn_started")
        old = one(dead, "build.1", "prepared")["allocation"]
        assert await trio.Path(old["workspace"]).is_dir()
        restart(h.run)
        state, rows = await h.go()
    assert state == "ended"
    assert "superseded" in kinds(rows, "build.1")
    new = one(rows, "build.2", "prepared")["allocation"]
    assert new["workspace"] == str(h.run.calls / "build.2") != old["workspace"]
    assert not await trio.Path(old["workspace"]).exists()
    assert not any(name.endswith("-build.1") for name in repo.list_worktrees())
    assert repo.references.get(old["branch"]) is None  # it held no commit of its own
    assert worktree_head(new["workspace"]) == crw_head(rows, new)
