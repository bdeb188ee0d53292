"""An executor's git effects in a session run on the simulated host: its subagent
writes files or commits them in P; the harvest records pending_tree, the moved
HEAD on its stray ref, and crw.commit advances the node branch."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pygit2
from trio.testing import MockClock

from crw.journal.rows import RowModel
from crw.workspace import proof, refs
from crw.workspace.placer import Placer
from tests.actors.test_review_rounds import reviewed
from tests.actors.test_session_run import RUN_ID, harness
from tests.workspace.gitrepo import commit_files, make_repo
from tests.workspace.test_placer_run import go

Rows = list[dict[str, Any]]
NODE = f"refs/crw/flow/{RUN_ID}/nodes/build"


def one(rows: Rows, call: str, kind: str) -> dict[str, Any]:
    (found,) = [r for r in rows if r.get("call") == call and r["row"] == kind]
    return found


def commit_of(repo: pygit2.Repository, sha: str) -> pygit2.Commit:
    return repo[sha].peel(pygit2.Commit)


def files(repo: pygit2.Repository, tree: str) -> dict[str, str]:
    """The files of `tree`, top level."""
    return {
        str(e.name): repo[e.id].peel(pygit2.Blob).data.decode()
        for e in repo[tree].peel(pygit2.Tree)
        if e.type_str == "blob"
    }


def proofs(repo: pygit2.Repository, rows: Rows) -> dict[str, proof.Proof]:
    return {p.call: p for p in proof.derive(rows, proof.snapshot(repo, rows))}


async def test_an_executor_that_writes_files_gets_its_pending_tree_committed(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: GEN-7, HARV-48, HARV-54"""
    repo = make_repo(tmp_path / "repo", {"main.go": "package main\n"})
    head = str(repo.head.target)
    async with harness(tmp_path) as h:
        await h.script({"marker": "build.1/*"}, writes={"fix.go": "package fix\n"})
        state, rows = await go(h, Placer(RUN_ID, str(repo.workdir), head, h.run.calls))
    assert state == "ended"
    done, made = one(rows, "build.1", "completed"), one(rows, "build.1", "crw_commit")
    assert rows.index(made) == rows.index(done) + 1  # same batch, after the terminal row
    assert "executor_head_moved" not in done
    assert files(repo, done["pending_tree"]) == {
        "main.go": "package main\n",
        "fix.go": "package fix\n",
    }
    assert (made["start"], made["head"], made["tree"]) == (head, head, done["pending_tree"])
    assert made["head_ref"] == f"refs/heads/crw/{RUN_ID}/build.1" and "node_old" not in made
    commit = commit_of(repo, made["commit"])
    assert [str(p) for p in commit.parent_ids] == [head]
    assert str(commit.tree_id) == done["pending_tree"]
    assert refs.read(repo, NODE) == made["commit"]
    assert str(pygit2.Repository(str(h.run.calls / "build.1")).head.target) == made["commit"]
    assert proofs(repo, rows)["build.1"] == proof.Proof("build.1", "build", made["commit"])
    for call in ("explore.1", "review.1"):  # other roles: no pending tree, no crw.commit
        assert "pending_tree" not in one(rows, call, "completed")
        assert not [r for r in rows if r.get("call") == call and r["row"] == "crw_commit"]


async def test_an_executor_that_commits_keeps_its_head_on_a_stray_ref(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: HARV-48, HARV-49, HARV-51, HARV-53, HARV-54, HARV-55"""
    repo = make_repo(tmp_path / "repo", {"main.go": "package main\n"})
    head = str(repo.head.target)
    async with harness(tmp_path) as h:
        await h.script({"marker": "build.1/*"}, writes={"fix.go": "fixed\n"}, commit="fix it")
        state, rows = await go(h, Placer(RUN_ID, str(repo.workdir), head, h.run.calls))
    assert state == "ended"
    done, made = one(rows, "build.1", "completed"), one(rows, "build.1", "crw_commit")
    moved = done["executor_head_moved"]
    stray = f"refs/crw/flow/{RUN_ID}/stray/build/a1-build.1"
    assert moved["start"] == head and moved["ref"] == stray
    subagent = commit_of(repo, moved["head"])
    assert subagent.message == "fix it" and [str(p) for p in subagent.parent_ids] == [head]
    assert refs.read(repo, stray) == moved["head"]
    assert made["head"] == moved["head"]  # the observed HEAD: the swap's old value
    assert [str(p) for p in commit_of(repo, made["commit"]).parent_ids] == [head]
    assert str(subagent.tree_id) == done["pending_tree"]
    # the subagent committed everything: its HEAD is the call's state
    assert proofs(repo, rows)["build.1"].state == moved["head"]
    assert refs.read(repo, NODE) == made["commit"]


async def test_a_fix_round_keeps_its_own_stray_ref_and_starts_at_the_builds_commit(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: HARV-48, HARV-50, HARV-53, HARV-54, GEN-7"""
    repo = make_repo(tmp_path / "repo", {"main.go": "package main\n"})
    head = str(repo.head.target)
    async with harness(tmp_path) as h:
        await reviewed(tmp_path, h)
        await h.script({"marker": "build.1/*"}, writes={"a.txt": "a\n"}, commit="build")
        await h.script(
            {"marker": "build.3/*"},
            answer={"summary": "fixed"},
            writes={"b.txt": "b\n"},
            commit="fix",
        )
        state, rows = await go(h, Placer(RUN_ID, str(repo.workdir), head, h.run.calls))
    assert state == "ended"
    built, fixed = one(rows, "build.1", "crw_commit"), one(rows, "build.3", "crw_commit")
    first = one(rows, "build.1", "completed")["executor_head_moved"]
    again = one(rows, "build.3", "completed")["executor_head_moved"]
    assert first["ref"] == f"refs/crw/flow/{RUN_ID}/stray/build/a1-build.1"
    assert again["ref"] == f"refs/crw/flow/{RUN_ID}/stray/build/a1-build.3"
    # the fix round's worktree was to be at the build's crw.commit, not the start
    assert again["start"] == built["commit"] and fixed["start"] == built["commit"]
    assert fixed["node_old"] == built["commit"]
    assert refs.read(repo, first["ref"]) == first["head"]
    assert refs.read(repo, again["ref"]) == again["head"]
    assert refs.read(repo, NODE) == fixed["commit"]
    assert files(repo, one(rows, "build.3", "completed")["pending_tree"]) == {
        "main.go": "package main\n",
        "a.txt": "a\n",
        "b.txt": "b\n",
    }
    assert all(p.holds for p in proofs(repo, rows).values())
    assert "pending_tree" not in one(rows, "build.2", "completed")  # the review's checkout


async def test_a_node_ref_moved_between_the_rows_and_the_ref_moves_holds_the_call(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: GEN-7, HARV-55: in a live run, someone moves the node branch the
    moment build.1's completed and crw_commit rows are durable, before the run
    moves it: the compare-and-swap finds the ref at neither value, the call is held
    effect_proof_mismatch (after its rows), and the moved ref is left as it is."""
    repo = make_repo(tmp_path / "repo", {"main.go": "package main\n"})
    head = str(repo.head.target)
    other = commit_files(tmp_path / "repo", {"z.txt": "z\n"}, "someone else")

    def move_node_ref(rows: Sequence[RowModel]) -> None:
        if any(row.row == "crw_commit" for row in rows):
            repo.references.create(NODE, pygit2.Oid(hex=other), force=True)

    async with harness(tmp_path) as h:
        await h.script({"marker": "build.1/*"}, writes={"fix.go": "package fix\n"})
        placer = Placer(RUN_ID, str(repo.workdir), head, h.run.calls)
        state, rows = await go(h, placer, after_commit=move_node_ref)
    mine = [r for r in rows if r.get("call") == "build.1"]
    assert [r["row"] for r in mine][-3:] == ["completed", "crw_commit", "held"]
    held = mine[-1]
    assert held["reason"] == "effect_proof_mismatch"
    assert held["error"] == f"{NODE}: holds {other}, not no ref"
    assert refs.read(repo, NODE) == other  # nothing moved back
    assert state == "waiting_decision"
    assert "review.1" not in {r.get("call") for r in rows}
