"""Pending tree, the executor's HEAD and crw.commit on real tmp repositories."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pygit2
import pytest

from crw.errors import RefusedError
from crw.journal.rows import ExecutorHeadMoved
from crw.workspace import commit, refs
from tests.workspace.gitrepo import attempt_worktree, commit_files, make_repo

WHEN = 1_800_000_000


def prepared(call: str, workspace: Path, start: str, node: str = "build") -> dict[str, Any]:
    allocation = {"workspace": str(workspace), "kind": "worktree", "start_commit": start}
    return {
        "row": "prepared",
        "call": call,
        "node": node,
        "role": "executor",
        "allocation": allocation,
    }


def crw_commit(call: str, sha: str, node: str = "build") -> dict[str, Any]:
    return {"row": "crw_commit", "call": call, "node": node, "commit": sha}


@pytest.fixture
def tree(tmp_path: Path) -> tuple[pygit2.Repository, Path, str]:
    repo = make_repo(tmp_path / "repo", {"a.txt": "a\n", "b.txt": "b\n", ".gitignore": "*.log\n"})
    start = str(repo.head.target)
    wt = attempt_worktree(repo, tmp_path / "wt", "crw-r1-build", start)
    return repo, wt, start


def test_pending_tree_adds_everything_honours_gitignore_and_keeps_the_index(
    tree: tuple[pygit2.Repository, Path, str],
) -> None:
    """spec: GEN-7"""
    repo, wt, _start = tree
    index_file = Path(pygit2.Repository(str(wt)).path) / "index"
    before = index_file.read_bytes()
    (wt / "b.txt").unlink()
    (wt / "a.txt").write_text("changed\n")
    (wt / "new" / "c.txt").parent.mkdir()
    (wt / "new" / "c.txt").write_text("c\n")
    (wt / "debug.log").write_text("ignored\n")
    pending = repo[commit.pending_tree(wt)].peel(pygit2.Tree)
    assert sorted(str(e.name) for e in pending) == [".gitignore", "a.txt", "new"]
    assert repo[pending["a.txt"].id].peel(pygit2.Blob).data == b"changed\n"
    assert index_file.read_bytes() == before
    assert pygit2.Repository(str(wt)).status()["new/c.txt"] == pygit2.enums.FileStatus.WT_NEW


def test_to_be_at_is_the_allocations_start_then_the_nodes_last_crw_commit() -> None:
    """spec: HARV-48"""
    p = Path("/w/build.1")
    rows = [prepared("build.1", p, "s0")]
    assert commit.to_be_at(rows, "build.1") == "s0"
    rows += [crw_commit("build.1", "c1"), {"row": "completed", "call": "build.1"}]
    rows += [prepared("build.3", p, "s0")]  # the fix round shares the allocation
    assert commit.to_be_at(rows, "build.3") == "c1"
    rows += [crw_commit("build.3", "c3"), crw_commit("other.1", "x", node="other")]
    assert commit.to_be_at(rows, "build.3") == "c3"
    # A new allocation of the node (a restart) starts at its own start commit; a
    # crw.commit before it is not after it.
    rows += [prepared("build.5", Path("/w/build.5"), "s5")]
    assert commit.to_be_at(rows, "build.5") == "s5"
    assert commit.node_tip(rows, "build") == "c3"
    assert commit.to_be_at(rows, "nobody.1") is None


def test_crw_commit_commits_the_pending_tree_on_start_and_advances_the_node_branch(
    tree: tuple[pygit2.Repository, Path, str],
) -> None:
    """spec: HARV-54, GEN-7"""
    repo, wt, start = tree
    (wt / "c.txt").write_text("c\n")
    rows = [prepared("build.1", wt, start)]
    got = commit.harvest(wt, rows, run="r1", node="build", call="build.1", attempt=1, when=WHEN)
    assert got is not None and got.moved is None
    row = got.commit
    assert (row.start, row.head, row.head_ref) == (start, start, "refs/heads/crw-r1-build")
    assert (row.node_ref, row.node_old, row.tree) == (
        "refs/crw/flow/r1/nodes/build",
        None,
        got.pending_tree,
    )
    made = repo[row.commit or ""].peel(pygit2.Commit)
    assert [str(p) for p in made.parent_ids] == [start]
    assert str(made.tree_id) == got.pending_tree
    assert refs.read(repo, row.node_ref or "") is None  # no ref moves before apply
    commit.apply(repo, row, got.moved, wt)
    assert refs.read(repo, row.node_ref or "") == row.commit
    assert str(pygit2.Repository(str(wt)).head.target) == row.commit
    assert pygit2.Repository(str(wt)).status() == {}  # the index follows the commit
    # the fix round: starts at the node's last crw.commit and advances the branch
    (wt / "d.txt").write_text("d\n")
    rows += [row.model_dump(), prepared("build.3", wt, start)]
    again = commit.harvest(
        wt, rows, run="r1", node="build", call="build.3", attempt=1, when=WHEN + 1
    )
    assert again is not None and again.moved is None
    assert (again.commit.start, again.commit.node_old) == (row.commit, row.commit)
    commit.apply(repo, again.commit, None, wt)
    assert refs.read(repo, row.node_ref or "") == again.commit.commit


def test_crw_commit_uses_the_observed_head_as_the_old_value(
    tree: tuple[pygit2.Repository, Path, str],
) -> None:
    """spec: HARV-54"""
    repo, wt, start = tree
    (wt / "c.txt").write_text("c\n")
    rows = [prepared("build.1", wt, start)]
    got = commit.harvest(wt, rows, run="r1", node="build", call="build.1", attempt=1, when=WHEN)
    assert got is not None
    late = commit_files(wt, {"late.txt": "l\n"}, "after harvest")
    with pytest.raises(commit.EffectRefused):
        commit.apply(repo, got.commit, got.moved, wt)
    assert str(pygit2.Repository(str(wt)).head.target) == late
    assert refs.read(repo, got.commit.node_ref or "") is None


def test_a_subagent_commit_is_kept_on_the_calls_stray_ref(
    tree: tuple[pygit2.Repository, Path, str],
) -> None:
    """spec: HARV-49, HARV-53, HARV-54"""
    repo, wt, start = tree
    head = commit_files(wt, {"c.txt": "c\n"}, "subagent")
    (wt / "d.txt").write_text("uncommitted\n")
    rows = [prepared("build.1", wt, start)]
    got = commit.harvest(wt, rows, run="r1", node="build", call="build.1", attempt=2, when=WHEN)
    assert got is not None
    ref = "refs/crw/flow/r1/stray/build/a2-build.1"
    assert got.moved == ExecutorHeadMoved(start=start, head=head, ref=ref)
    assert got.commit.head == head and got.commit.start == start
    commit.apply(repo, got.commit, got.moved, wt)
    assert refs.read(repo, ref) == head
    made = repo[got.commit.commit or ""].peel(pygit2.Commit)
    assert [str(p) for p in made.parent_ids] == [start]  # on start, not on the stray HEAD
    assert sorted(str(e.name) for e in made.tree) == [
        ".gitignore",
        "a.txt",
        "b.txt",
        "c.txt",
        "d.txt",
    ]
    assert str(pygit2.Repository(str(wt)).head.target) == got.commit.commit


@pytest.mark.parametrize("crash_after", [0, 1, 2, 3])
def test_every_crash_point_of_apply_resumes_to_the_same_refs(
    tree: tuple[pygit2.Repository, Path, str],
    crash_after: int,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """spec: HARV-51, HARV-52, HARV-54"""
    repo, wt, start = tree
    commit_files(wt, {"c.txt": "c\n"}, "subagent")
    rows = [prepared("build.1", wt, start)]
    got = commit.harvest(wt, rows, run="r1", node="build", call="build.1", attempt=1, when=WHEN)
    assert got is not None
    real_swap, real_keep = refs.swap, refs.keep_stray
    moves = [0]

    class Crash(Exception):
        pass

    def counted(fn: Any) -> Any:
        def inner(*args: Any, **kw: Any) -> Any:
            if moves[0] == crash_after:
                raise Crash
            moves[0] += 1
            return fn(*args, **kw)

        return inner

    monkeypatch.setattr(refs, "keep_stray", counted(real_keep))
    monkeypatch.setattr(refs, "swap", counted(real_swap))
    with pytest.raises(Crash):
        commit.apply(repo, got.commit, got.moved, wt)
    monkeypatch.setattr(refs, "keep_stray", real_keep)
    monkeypatch.setattr(refs, "swap", real_swap)
    commit.apply(pygit2.Repository(str(tree[0].path)), got.commit, got.moved, wt)  # resumed
    assert got.moved is not None
    assert refs.read(repo, got.moved.ref or "") == got.moved.head
    assert str(pygit2.Repository(str(wt)).head.target) == got.commit.commit
    assert refs.read(repo, got.commit.node_ref or "") == got.commit.commit
    assert pygit2.Repository(str(wt)).status() == {}  # the index follows the commit
    # and once more: every ref is at its new value already
    commit.apply(repo, got.commit, got.moved, wt)
    assert refs.read(repo, got.commit.node_ref or "") == got.commit.commit


def _applied_to_the_end(repo: pygit2.Repository, wt: Path, got: commit.Harvest) -> None:
    """Apply `got`'s crw.commit and check where it leaves P's index and the node branch."""
    commit.apply(repo, got.commit, got.moved, wt)
    assert pygit2.Repository(str(wt)).status() == {}  # P's index is the commit's tree
    assert refs.read(repo, got.commit.node_ref or "") == got.commit.commit


def _harvested_c(
    tree: tuple[pygit2.Repository, Path, str],
) -> tuple[pygit2.Repository, Path, commit.Harvest]:
    """The repository, P with a new file c.txt, and build.1's harvest of it."""
    repo, wt, start = tree
    (wt / "c.txt").write_text("c\n")
    rows = [prepared("build.1", wt, start)]
    got = commit.harvest(wt, rows, run="r1", node="build", call="build.1", attempt=1, when=WHEN)
    assert got is not None
    return repo, wt, got


def test_a_crash_between_ps_head_and_its_index_resumes_to_the_same_index(
    tree: tuple[pygit2.Repository, Path, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: HARV-54, GEN-7; P's HEAD moved, its index not yet written: applied
    again, the HEAD is at the commit already and the index is written then"""
    repo, wt, got = _harvested_c(tree)

    class Crash(Exception):
        pass

    def crash(self: pygit2.Index) -> None:
        raise Crash

    with monkeypatch.context() as patched:
        patched.setattr(pygit2.Index, "write", crash)
        with pytest.raises(Crash):
            commit.apply(repo, got.commit, got.moved, wt)
    assert str(pygit2.Repository(str(wt)).head.target) == got.commit.commit
    assert pygit2.Repository(str(wt)).status() != {}  # the commit's file shows as not staged
    _applied_to_the_end(repo, wt, got)


def test_a_git_command_holding_ps_index_is_waited_for(
    tree: tuple[pygit2.Repository, Path, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: HARV-54; a git command in P (a `git status` refreshing the index) holds
    its lock for a moment: apply waits, then writes the index"""
    repo, wt, got = _harvested_c(tree)
    lock = Path(pygit2.Repository(str(wt)).path) / "index.lock"
    lock.write_bytes(b"DIRC")
    waits: list[float] = []

    def wait(seconds: float) -> None:  # the git command ends during apply's first wait
        waits.append(seconds)
        lock.unlink(missing_ok=True)

    monkeypatch.setattr(time, "sleep", wait)
    commit.apply(repo, got.commit, got.moved, wt)
    assert waits == [refs.LOCK_WAIT]
    assert pygit2.Repository(str(wt)).status() == {}
    assert refs.read(repo, got.commit.node_ref or "") == got.commit.commit


def test_a_lock_on_ps_index_that_stays_is_refused_with_its_fix(
    tree: tuple[pygit2.Repository, Path, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: HARV-54; a lock on P's index that stays (no killed process of the run's
    left it: the live process moved P's HEAD itself) stops the apply before the
    node branch moves, with one line naming the file and the fix; once it is
    removed, the apply goes on to the same refs"""
    monkeypatch.setattr(refs, "LOCK_TRIES", 3)
    repo, wt, got = _harvested_c(tree)
    lock = Path(pygit2.Repository(str(wt)).path) / "index.lock"
    lock.write_bytes(b"DIRC")
    with pytest.raises(commit.IndexLocked) as refused:
        commit.apply(repo, got.commit, got.moved, wt)
    assert str(refused.value) == (
        f"the index of {wt} stays locked ({lock}); if no git command is running in "
        f"{wt}, remove that file, then resume the run"
    )
    assert isinstance(refused.value, RefusedError)
    assert lock.read_bytes() == b"DIRC"
    assert refs.read(repo, got.commit.node_ref or "") is None
    lock.unlink()
    _applied_to_the_end(repo, wt, got)


def test_an_index_write_that_fails_unlocked_is_raised_at_once(
    tree: tuple[pygit2.Repository, Path, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: HARV-54; a write of P's index that fails with no lock taken (a full
    disk) is git's own error, at once: not waited for, not called a lock"""
    repo, wt, got = _harvested_c(tree)

    def full(self: pygit2.Index) -> None:
        raise pygit2.GitError("failed to write index: No space left on device")

    def wait(seconds: float) -> None:
        raise AssertionError("waited for a lock nobody holds")

    monkeypatch.setattr(pygit2.Index, "write", full)
    monkeypatch.setattr(time, "sleep", wait)
    with pytest.raises(pygit2.GitError, match="No space left"):
        commit.apply(repo, got.commit, got.moved, wt)
    assert refs.read(repo, got.commit.node_ref or "") is None


def test_a_damaged_index_of_p_is_made_again_from_the_commit(
    tree: tuple[pygit2.Repository, Path, str],
) -> None:
    """spec: HARV-54, GEN-7; P's index with a damaged byte (libgit2 refuses its
    checksum): applied again with P's HEAD at the commit, the index is made again
    as the commit's tree"""
    repo, wt, got = _harvested_c(tree)
    commit.apply(repo, got.commit, got.moved, wt)
    index = Path(pygit2.Repository(str(wt)).path) / "index"
    data = bytearray(index.read_bytes())
    data[len(data) // 2] ^= 0xFF
    index.write_bytes(bytes(data))
    with pytest.raises(pygit2.GitError):
        pygit2.Repository(str(wt)).index  # noqa: B018 - the read is the check
    _applied_to_the_end(repo, wt, got)


def test_the_same_row_rebuilds_the_same_commit(tree: tuple[pygit2.Repository, Path, str]) -> None:
    """spec: HARV-54"""
    repo, wt, start = tree
    rows = [prepared("build.1", wt, start)]
    got = commit.harvest(wt, rows, run="r1", node="build", call="build.1", attempt=1, when=WHEN)
    assert got is not None
    assert commit.commit_object(repo, got.commit, "build.1") == got.commit.commit
