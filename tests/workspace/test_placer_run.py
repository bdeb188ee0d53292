"""The placer in a session run on the simulated host, with a scripted owner."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pygit2
import pytest
from trio.testing import MockClock

from crw.actors.session_run import run_session_calls
from crw.journal.log import read_journal
from crw.journal.replay import replay
from crw.journal.rows import Prepared, RowModel
from crw.workspace.placer import Placer
from tests.actors.test_session_run import RUN_ID, Harness, harness, session_context
from tests.workspace.gitrepo import make_repo


async def go(
    h: Harness,
    placer: Placer | None,
    seen: dict[str, bool] | None = None,
    after_commit: Callable[[Sequence[RowModel]], None] | None = None,
) -> tuple[str, list[dict[str, Any]]]:
    """`Harness.go` with the run's placer; `seen` gets, for each call, whether its P
    existed the moment its prepared row was durable; `after_commit` is told each
    batch once it is durable."""

    def after(rows: Sequence[RowModel]) -> None:
        if after_commit is not None:
            after_commit(rows)
        for row in rows:
            if isinstance(row, Prepared) and seen is not None and row.allocation is not None:
                seen[str(row.call)] = Path(str(row.allocation.workspace)).exists()

    async with session_context(
        h.run, h.client, h.owner.thread_id, h.settings, after_commit=after, placer=placer
    ) as (ctx, rows, nursery):
        await nursery.start(ctx.inbox.run)
        nursery.start_soon(h.owner.play)
        state = await run_session_calls(ctx, ctx.workflow.pool, replay(rows), rows)
    return state, read_journal(h.run.journal).rows


def first(rows: list[dict[str, Any]], kind: str, call: str) -> dict[str, Any]:
    return next(row for row in rows if row["row"] == kind and row.get("call") == call)


async def test_session_run_places_each_call_in_its_worktree_or_checkout(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: STEP-1, STEP-2, STEP-3, STEP-4, STEP-6, GEN-7"""
    repo = make_repo(tmp_path / "repo", {"main.go": "package main\n"})
    head = str(repo.head.target)
    root = str(repo.workdir).rstrip("/")
    async with harness(tmp_path) as h:
        placer = Placer(RUN_ID, root, head, h.run.calls)
        seen: dict[str, bool] = {}
        state, rows = await go(h, placer, seen)
    assert state == "ended"
    assert seen == {"explore.1": False, "build.1": False, "review.1": False}  # STEP-2
    calls = h.run.calls
    expected = {
        "explore.1": {"workspace": str(calls / "explore.1"), "kind": "checkout"},
        "build.1": {
            "workspace": str(calls / "build.1"),
            "kind": "worktree",
            "branch": f"refs/heads/crw/{RUN_ID}/build.1",
        },
        "review.1": {"workspace": str(calls / "review.1"), "kind": "checkout"},
    }
    for call, allocation in expected.items():
        prepared = first(rows, "prepared", call)
        assert prepared["allocation"] == allocation | {"start_commit": head}
        # the prepared row comes first: P is made only after it (STEP-2)
        assert rows.index(prepared) < rows.index(first(rows, "step_published", call))
        # P is the call's cwd for every purpose: the step, the bind (STEP-6)
        assert first(rows, "step_published", call)["workspace"] == allocation["workspace"]
        started = first(rows, "thread_started", call)
        assert started["cwd"] == allocation["workspace"]
        assert started["host_cwd"] != allocation["workspace"]
    build = pygit2.Repository(str(calls / "build.1"))
    assert build.head.name == f"refs/heads/crw/{RUN_ID}/build.1"
    # crw.commit moved the worktree's HEAD to the pending tree committed on start
    assert [str(p) for p in build.head.peel(pygit2.Commit).parent_ids] == [head]
    assert (calls / "build.1" / "main.go").read_text() == "package main\n"
    assert pygit2.Repository(str(calls / "review.1")).head_is_detached
    assert sorted(repo.list_worktrees()) == sorted(f"crw-{RUN_ID}-{c}" for c in expected)


async def test_session_run_without_a_repository_keeps_plain_directories(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: STEP-1"""
    async with harness(tmp_path) as h:
        state, rows = await go(h, Placer(RUN_ID, None, None, h.run.calls))
    assert state == "ended"
    for call in ("explore.1", "build.1", "review.1"):
        allocation = first(rows, "prepared", call)["allocation"]
        assert allocation == {"workspace": str(h.run.calls / call), "kind": "directory"}
        assert (h.run.calls / call).is_dir() and not (h.run.calls / call / ".git").exists()


def allocations_in_loop(monkeypatch: pytest.MonkeyPatch) -> dict[str, bool]:
    """Filled, for each call the placer allocates from now on, with whether it was
    allocated in the run's (the main) thread."""
    in_loop: dict[str, bool] = {}
    allocate = Placer.allocate

    def spy(self: Placer, call: str, *args: Any) -> Any:
        in_loop[call] = threading.current_thread() is threading.main_thread()
        return allocate(self, call, *args)

    monkeypatch.setattr(Placer, "allocate", spy)
    return in_loop


async def test_only_a_call_that_reads_its_node_ref_is_allocated_in_a_worker_thread(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The placer's decision takes microseconds, a hop to a worker thread and back
    more: only an executor's allocation, which reads its node ref from the
    repository, is made off the run's thread."""
    in_loop = allocations_in_loop(monkeypatch)
    repo = make_repo(tmp_path / "repo", {"main.go": "package main\n"})
    async with harness(tmp_path) as h:
        placer = Placer(RUN_ID, str(repo.workdir).rstrip("/"), str(repo.head.target), h.run.calls)
        state, _ = await go(h, placer)
    assert state == "ended"
    assert in_loop == {"explore.1": True, "build.1": False, "review.1": True}


def packet_of(step: dict[str, Any]) -> str:
    return Path(step["packet"]).read_text()


async def test_a_qa_capture_node_runs_in_its_scratch_worktree_end_to_end(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: STEP-5, STEP-6: a node with `qa = "capture"` (a reviewer here) gets a
    scratch worktree on its own branch of the run at the head, whatever its role;
    that P is the call's cwd for every purpose: the step's workspace, the packet's
    working directory and the bound subagent's cwd (the host's cwd only host_cwd)."""
    repo = make_repo(tmp_path / "repo", {"main.go": "package main\n"})
    head = str(repo.head.target)
    async with harness(tmp_path) as h:
        wf = h.run.root.parent / "wf.toml"
        wf.write_text(
            wf.read_text().replace('role = "reviewer"\n', 'role = "reviewer"\nqa = "capture"\n')
        )
        placer = Placer(RUN_ID, str(repo.workdir).rstrip("/"), head, h.run.calls)
        state, rows = await go(h, placer)
    assert state == "ended" and rows[-1]["status"] == "completed"
    scratch = str(h.run.calls / "review.1")
    prepared = first(rows, "prepared", "review.1")
    assert prepared["allocation"] == {
        "workspace": scratch,
        "kind": "scratch",
        "start_commit": head,
        "branch": f"refs/heads/crw/{RUN_ID}/review.1",
    }
    step = first(rows, "step_published", "review.1")
    assert step["workspace"] == scratch
    assert scratch in packet_of(step)
    started = first(rows, "thread_started", "review.1")
    assert started["cwd"] == scratch and started["host_cwd"] != scratch
    tree = pygit2.Repository(scratch)
    assert (tree.head.name, str(tree.head.target)) == (f"refs/heads/crw/{RUN_ID}/review.1", head)
    assert first(rows, "prepared", "explore.1")["allocation"]["kind"] == "checkout"
