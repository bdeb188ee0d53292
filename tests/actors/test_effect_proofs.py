"""A resumed run finishes and proves its executors' git effects (real tmp repos)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pygit2
import pytest

from crw.actors import effect_proofs
from crw.actors.journal_writer import open_journal_writer
from crw.clock import fixed_clock
from crw.journal.rows import Completed
from crw.workspace import commit, refs
from tests.workspace.gitrepo import attempt_worktree, commit_files, make_repo

NOW = "2026-01-01T00:00:00.000000Z"


def _setup(tmp_path: Path) -> tuple[pygit2.Repository, Path, list[dict[str, Any]], commit.Harvest]:
    repo = make_repo(tmp_path / "repo", {"a.txt": "a\n"})
    start = str(repo.head.target)
    wt = attempt_worktree(repo, tmp_path / "wt", "crw-r1-build", start)
    commit_files(wt, {"b.txt": "b\n"}, "subagent")
    (wt / "c.txt").write_text("uncommitted\n")
    allocation = {"workspace": str(wt), "kind": "worktree", "start_commit": start}
    rows: list[dict[str, Any]] = [
        {"row": "prepared", "call": "build.1", "node": "build", "allocation": allocation}
    ]
    got = commit.harvest(wt, rows, run="r1", node="build", call="build.1", attempt=1, when=1)
    assert got is not None
    done = Completed(call="build.1", pending_tree=got.pending_tree, executor_head_moved=got.moved)
    rows.append(done.model_dump())
    return repo, wt, rows, got


async def _settle(
    tmp_path: Path, rows: list[dict[str, Any]], repository: str | None = "repo"
) -> list[dict[str, Any]]:
    where = str(tmp_path / repository) if repository else None
    async with open_journal_writer(tmp_path / "journal.jsonl", clock=fixed_clock()) as journal:
        return await effect_proofs.settle(journal, rows, run="r1", repository=where, now=NOW)


def _outcome(repo: pygit2.Repository, wt: Path, got: commit.Harvest) -> tuple[Any, ...]:
    node = refs.read(repo, "refs/crw/flow/r1/nodes/build") or ""
    made = repo[node].peel(pygit2.Commit)
    stray = refs.read(repo, got.moved.ref or "") if got.moved else None
    head = str(pygit2.Repository(str(wt)).head.target)
    return (str(made.tree_id), [str(p) for p in made.parent_ids], stray, head == node)


def _index_tree(wt: Path) -> str:
    """The tree P's index (as written on disk) holds: P's `git status` shows no
    staged change when it is the tree of P's HEAD."""
    return str(pygit2.Repository(str(wt)).index.write_tree())


@pytest.mark.parametrize("kill", ["torn_batch", "after_rows", "after_stray", "after_head"])
async def test_every_kill_point_resumes_to_the_same_outcome(tmp_path: Path, kill: str) -> None:
    """spec: GEN-7, HARV-49, HARV-51, HARV-54"""
    repo, wt, rows, got = _setup(tmp_path)
    expected = (got.pending_tree, [got.commit.start], got.moved.head if got.moved else None, True)
    if kill != "torn_batch":
        rows.append(got.commit.model_dump())
    if kill in ("after_stray", "after_head") and got.moved:
        refs.keep_stray(repo, got.moved.ref or "", got.moved.head or "")
    if kill == "after_head":
        refs.swap(repo, got.commit.head_ref or "", got.commit.head, got.commit.commit or "")
    taken = await _settle(tmp_path, rows)
    assert [r["row"] for r in taken] == (["crw_commit"] if kill == "torn_batch" else [])
    assert _outcome(repo, wt, got) == expected
    assert _index_tree(wt) == got.pending_tree  # as an undisturbed apply leaves it
    if kill != "torn_batch":
        assert refs.read(repo, "refs/crw/flow/r1/nodes/build") == got.commit.commit
    assert await _settle(tmp_path, [*rows, *taken]) == []  # proved: nothing more to write


@pytest.mark.parametrize("inside", ["stray", "head", "node"])
async def test_a_process_killed_inside_a_swap_resumes_to_the_same_outcome(
    tmp_path: Path, inside: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: GEN-7, HARV-51, HARV-54; killed while it held a ref's lock file (made
    exclusively, the new value written in it), the process left the file: the next
    process removes it before it moves the ref, and ends with the same refs"""
    monkeypatch.setattr(refs, "LOCK_TRIES", 3)  # a lock the resume waits for fails fast
    repo, wt, rows, got = _setup(tmp_path)
    assert got.moved is not None and got.commit.head_ref and got.commit.node_ref
    expected = (got.pending_tree, [got.commit.start], got.moved.head, True)
    rows.append(got.commit.model_dump())
    if inside in ("head", "node"):
        refs.keep_stray(repo, got.moved.ref or "", got.moved.head or "")
    if inside == "node":
        refs.swap(repo, got.commit.head_ref, got.commit.head, got.commit.commit or "")
    name = {"stray": got.moved.ref, "head": got.commit.head_ref, "node": got.commit.node_ref}
    lock = Path(repo.path) / f"{name[inside]}.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    lock.write_text(f"{got.commit.commit}\n")
    taken = await _settle(tmp_path, rows)
    assert taken == []
    assert not lock.exists()
    assert _outcome(repo, wt, got) == expected
    assert refs.read(repo, got.commit.node_ref) == got.commit.commit
    assert await _settle(tmp_path, rows) == []


async def test_a_process_killed_inside_the_index_write_resumes_to_the_same_outcome(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: GEN-7, HARV-54; killed while it wrote P's index after P's HEAD moved
    (libgit2 writes it through `index.lock`, made exclusively), the process left
    the lock and P's index at the subagent's tree: the next process waits for the
    lock as for a git command's, then removes it, writes the index, moves the node
    branch, and ends as an undisturbed apply does"""
    monkeypatch.setattr(refs, "LOCK_TRIES", 3)
    repo, wt, rows, got = _setup(tmp_path)
    assert got.moved is not None and got.commit.head_ref and got.commit.node_ref
    expected = (got.pending_tree, [got.commit.start], got.moved.head, True)
    rows.append(got.commit.model_dump())
    refs.keep_stray(repo, got.moved.ref or "", got.moved.head or "")
    refs.swap(repo, got.commit.head_ref, got.commit.head, got.commit.commit or "")
    stale = _index_tree(wt)
    lock = Path(pygit2.Repository(str(wt)).path) / "index.lock"
    lock.write_bytes(b"DIRC")  # the start of the index the killed process wrote
    assert stale != got.pending_tree
    taken = await _settle(tmp_path, rows)
    assert taken == []
    assert not lock.exists()
    assert _outcome(repo, wt, got) == expected
    assert _index_tree(wt) == got.pending_tree
    assert refs.read(repo, got.commit.node_ref) == got.commit.commit
    assert await _settle(tmp_path, rows) == []


async def test_a_lock_on_the_index_of_p_before_its_head_moved_is_refused_not_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: GEN-7, HARV-54; killed before it moved P's HEAD, the process never
    wrote P's index: a lock on it is someone else's, and the resume stops with the
    line that names it and the fix, the lock left as it is"""
    monkeypatch.setattr(refs, "LOCK_TRIES", 3)
    repo, wt, rows, got = _setup(tmp_path)
    assert got.moved is not None
    rows.append(got.commit.model_dump())
    refs.keep_stray(repo, got.moved.ref or "", got.moved.head or "")
    lock = Path(pygit2.Repository(str(wt)).path) / "index.lock"
    lock.write_bytes(b"DIRC")
    refused = pytest.RaisesExc(commit.IndexLocked, match="remove that file, then resume the run")
    with pytest.RaisesGroup(refused, flatten_subgroups=True):
        await _settle(tmp_path, rows)
    assert lock.read_bytes() == b"DIRC"
    assert refs.read(repo, got.commit.node_ref or "") is None


async def test_a_resume_leaves_the_index_lock_of_p_whose_index_is_at_its_commit(
    tmp_path: Path,
) -> None:
    """spec: GEN-7; P's index already at the commit (the apply finished): a lock on
    it is no killed process's (the next round's subagent may be running git in P),
    and the resume leaves it and the index as they are"""
    repo, wt, rows, got = _setup(tmp_path)
    rows.append(got.commit.model_dump())
    commit.apply(repo, got.commit, got.moved, wt)
    lock = Path(pygit2.Repository(str(wt)).path) / "index.lock"
    lock.write_bytes(b"DIRC")
    assert await _settle(tmp_path, rows) == []
    assert lock.read_bytes() == b"DIRC"
    assert _index_tree(wt) == got.pending_tree


async def test_a_resumed_run_holds_a_call_whose_tree_no_longer_matches(tmp_path: Path) -> None:
    """spec: GEN-7, HARV-55"""
    repo, wt, rows, got = _setup(tmp_path)
    rows.append(got.commit.model_dump())
    commit.apply(repo, got.commit, got.moved, wt)
    other = commit_files(tmp_path / "repo", {"z.txt": "z\n"}, "someone else")
    repo.references.create(
        got.commit.node_ref or "", pygit2.Oid(hex=other), force=True
    )  # moved behind the run
    taken = await _settle(tmp_path, rows)
    assert [(r["row"], r["call"], r["reason"]) for r in taken] == [
        ("held", "build.1", "effect_proof_mismatch")
    ]
    assert "refs/crw/flow/r1/nodes/build holds" in taken[0]["error"]
    assert refs.read(repo, got.commit.node_ref or "") == other  # nothing moved back


async def test_a_run_without_git_settles_nothing(tmp_path: Path) -> None:
    """spec: GEN-7"""
    rows: list[dict[str, Any]] = [
        {
            "row": "prepared",
            "call": "a.1",
            "node": "a",
            "allocation": {"workspace": str(tmp_path), "kind": "directory"},
        }
    ]
    assert await _settle(tmp_path, rows, repository=None) == []
