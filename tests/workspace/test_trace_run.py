"""SessionConfig.Trace on placed workspaces: each call's P is the placer's worktree
or checkout of the owner's repository, and the simulated subagents edit files
(`writes`, `commit`) as real ones do. Each test asserts the rows written."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import trio
from trio.testing import MockClock

from crw.journal.log import read_journal
from crw.workspace.placer import Placer
from tests.actors.test_session_run import RUN_ID, Harness, kinds
from tests.actors.test_session_trace import traced, warnings_of
from tests.workspace.gitrepo import head_of
from tests.workspace.test_placer_run import go


@asynccontextmanager
async def placed(tmp_path: Path, *, trace: bool = True) -> AsyncIterator[tuple[Harness, Placer]]:
    """The traced harness with the run's placer on the owner's checkout."""
    async with traced(tmp_path, trace=trace) as h:
        checkout = h.run.root.parents[2]
        yield h, Placer(RUN_ID, str(checkout), head_of(checkout), h.run.calls)


async def script(h: Harness, role: str, **behaviour: Any) -> None:
    await h.script({"role": role}, seconds=60, **behaviour)


async def run_placed(h: Harness, placer: Placer) -> list[dict[str, Any]]:
    state, rows = await go(h, placer)
    assert state == "ended" and rows[-1]["status"] == "completed"
    return rows


def allocation(rows: list[dict[str, Any]], call: str) -> dict[str, Any]:
    prepared = next(r for r in rows if r["row"] == "prepared" and r["call"] == call)
    found: dict[str, Any] = prepared["allocation"]
    return found


async def test_a_reviewer_writing_in_its_checkout_is_read_role_wrote(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: HARV-45, HARV-43, TRACE-1"""
    async with placed(tmp_path) as (h, placer):
        await script(h, "reviewer", writes={"REVIEW.md": "my notes\n"})
        await script(h, "executor", writes={"main.py": "x = 1\n"})
        rows = await run_placed(h, placer)
    assert allocation(rows, "look.1")["kind"] == "checkout"
    assert allocation(rows, "build.1")["kind"] == "worktree"
    assert warnings_of(rows) == [("read_role_wrote", "look.1")]  # the executor may write P
    assert kinds(rows, "look.1")[-2:] == ["read_role_wrote", "completed"]
    warning = next(r for r in rows if r["row"] == "read_role_wrote")
    assert warning["where"] == allocation(rows, "look.1")["workspace"]


async def test_a_reviewer_that_commits_moves_head_and_is_read_role_wrote(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: HARV-45, TRACE-1. A clean status after the commit: HEAD tells."""
    async with placed(tmp_path) as (h, placer):
        await script(h, "reviewer", writes={"REVIEW.md": "notes\n"}, commit="review notes")
        rows = await run_placed(h, placer)
    assert warnings_of(rows) == [("read_role_wrote", "look.1")]


async def test_an_executor_writing_in_the_owners_checkout_is_executor_wrote_outside(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: HARV-46, TRACE-2. Its own worktree it may change; the owner's checkout
    (its host cwd) it may not, and that is recorded."""
    async with placed(tmp_path) as (h, placer):
        await script(h, "executor", writes={"main.py": "x = 1\n"}, commit="the fix")
        checkout = h.run.root.parents[2]

        async def outside() -> None:  # while its turn is in flight
            while True:
                rows = read_journal(h.run.journal).rows
                if "turn_started" in kinds(rows, "build.1"):
                    break
                await trio.sleep(1)
            (checkout / "README.md").write_text("the executor wrote here too\n")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(outside)
            rows = await run_placed(h, placer)
    assert warnings_of(rows) == [("executor_wrote_outside", "build.1")]
    warning = next(r for r in rows if r["row"] == "executor_wrote_outside")
    assert warning["where"] == str(checkout.resolve())
    build = kinds(rows, "build.1")  # the warning in the batch of its end, before it
    assert build.index("executor_wrote_outside") + 1 == build.index("completed")
    # Recorded, never enforced: nothing the executor wrote was undone.
    assert (checkout / "README.md").read_text() == "the executor wrote here too\n"
    assert (h.run.calls / "build.1" / "main.py").read_text() == "x = 1\n"


async def test_trace_off_on_placed_workspaces_takes_nothing(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: HARV-44"""
    async with placed(tmp_path, trace=False) as (h, placer):
        await script(h, "reviewer", writes={"REVIEW.md": "my notes\n"}, commit="notes")
        rows = await run_placed(h, placer)
    assert warnings_of(rows) == [] and all("trace" not in row for row in rows)
