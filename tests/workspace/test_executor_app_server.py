"""An executor's git effects on the App Server backend: its thread works in its
worktree, commits there; the harvest keeps its HEAD on a stray ref, the fix round
its own, and crw.commit advances the node branch, as on the session backend."""

from __future__ import annotations

from pathlib import Path

import pytest
from trio.testing import MockClock

from crw.host.sim.server import open_sim_host
from crw.workspace import proof, refs
from tests.actors.test_app_server_review import one, reviewed
from tests.drills.scenes import FIXED
from tests.workspace.test_placer_app_server import placed


async def test_app_server_executor_commits_land_on_stray_refs_and_the_node_branch(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: GEN-7, HARV-48, HARV-49, HARV-50, HARV-53, HARV-54, HARV-55"""
    async with open_sim_host(tmp_path / "home") as sim:
        made = await reviewed(sim, tmp_path)
        for marker, behaviour in (
            ("build.1/*", {"seconds": 5, "writes": {"a.py": "a\n"}, "commit": "build"}),
            ("build.3/*", {"seconds": 5, "answer": FIXED, "writes": {"b.py": "b\n"}}),
        ):
            await made.request("sim/script", {"match": {"marker": marker}, "behaviour": behaviour})
        repo = placed(tmp_path, made.run_dir, monkeypatch)
        assert await made.process() == "ended"
        rows = made.rows()
    start = one(rows, "build.1", "prepared")["allocation"]["start_commit"]
    built, fixed = one(rows, "build.1", "completed"), one(rows, "build.3", "completed")
    moved = built["executor_head_moved"]
    assert (moved["start"], moved["ref"]) == (start, "refs/crw/flow/run-1/stray/build/a1-build.1")
    assert refs.read(repo, moved["ref"]) == moved["head"]
    first, second = one(rows, "build.1", "crw_commit"), one(rows, "build.3", "crw_commit")
    # the fix round wrote without committing: no stray ref; it starts at build.1's commit
    assert "executor_head_moved" not in fixed
    assert refs.read(repo, "refs/crw/flow/run-1/stray/build/a1-build.3") is None
    assert (second["start"], second["head"], second["node_old"]) == (first["commit"],) * 3
    assert refs.read(repo, "refs/crw/flow/run-1/nodes/build") == second["commit"]
    assert "pending_tree" not in one(rows, "build.2", "completed")
    states = {p.call: p.state for p in proof.derive(rows, proof.snapshot(repo, rows))}
    assert states == {"build.1": moved["head"], "build.3": second["commit"]}
