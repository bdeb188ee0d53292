"""The placer on real git repositories made in tmp dirs (pygit2 only)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pygit2
import pytest

from crw.cli.run.answer import append_row
from crw.cli.run.housekeeping import rm_command
from crw.engine.run.rundir import RunDir
from crw.engine.run.runspec import RunSpec, WorkflowRef, write_run_spec
from crw.errors import RefusedError
from crw.journal.rows import Allocation, Prepared
from crw.workspace import worktrees
from crw.workspace.names import node_ref, worktree_name
from crw.workspace.placer import Placer, allocation_of, kind_of
from tests.workspace.gitrepo import commit_files, make_repo

RUN = "wf-run-1"


@pytest.fixture
def repo(tmp_path: Path) -> pygit2.Repository:
    return make_repo(tmp_path / "repo", {"a.txt": "a\n"})


def placer_of(repo: pygit2.Repository, tmp_path: Path, head: str | None = None) -> Placer:
    root = str(Path(str(repo.workdir)).resolve())
    return Placer(RUN, root, head or str(repo.head.target), tmp_path / "run" / "calls")


def worktree_head(path: Path) -> tuple[str | None, str]:
    """P's branch (None: detached) and HEAD commit, read as git reads them."""
    tree = pygit2.Repository(str(path))
    branch = None if tree.head_is_detached else tree.head.name
    return branch, str(tree.head.target)


def test_executor_call_gets_an_attempt_worktree_at_the_head(
    repo: pygit2.Repository, tmp_path: Path
) -> None:
    """spec: STEP-1, STEP-3"""
    placer = placer_of(repo, tmp_path)
    allocation = placer.allocate("build.1", "build", "executor", None)
    assert allocation == Allocation(
        workspace=str(placer.calls / "build.1"),
        kind="worktree",
        start_commit=str(repo.head.target),
        branch=f"refs/heads/crw/{RUN}/build.1",
    )
    placer.make(allocation, "build")
    path = placer.calls / "build.1"
    assert worktree_head(path) == (f"refs/heads/crw/{RUN}/build.1", str(repo.head.target))
    assert (path / "a.txt").read_text() == "a\n"
    assert worktree_name(RUN, path) in repo.list_worktrees()
    assert pygit2.Repository(str(path)).status() == {}


def test_an_executor_tier_is_an_executor(repo: pygit2.Repository, tmp_path: Path) -> None:
    """spec: STEP-3"""
    assert kind_of("executor-t1", None, "/repo") == "worktree"
    placer = placer_of(repo, tmp_path)
    assert placer.allocate("build.1", "build", "executor-t1", None).kind == "worktree"


def test_executor_starts_at_the_node_ref_when_the_node_has_one(
    repo: pygit2.Repository, tmp_path: Path
) -> None:
    """spec: STEP-3"""
    first = str(repo.head.target)
    second = commit_files(tmp_path / "repo", {"b.txt": "b\n"}, "second")
    repo.references.create(node_ref(RUN, "build"), pygit2.Oid(hex=second))
    placer = placer_of(repo, tmp_path, head=first)
    allocation = placer.allocate("build.2", "build", "executor", None)
    assert allocation.start_commit == second
    placer.make(allocation, "build")
    assert worktree_head(placer.calls / "build.2")[1] == second
    # every other role starts at the head option
    assert placer.allocate("review.1", "build", "reviewer", None).start_commit == first


@pytest.mark.parametrize("role", ["architect", "explorer", "reviewer", "critic"])
def test_every_other_role_gets_a_private_checkout_at_the_head_option(
    repo: pygit2.Repository, tmp_path: Path, role: str
) -> None:
    """spec: STEP-1, STEP-4"""
    first = str(repo.head.target)
    # HEAD moves; the head option does not
    commit_files(tmp_path / "repo", {"a.txt": "changed\n"}, "second")
    placer = placer_of(repo, tmp_path, head=first)
    allocation = placer.allocate("look.1", "look", role, None)
    assert (allocation.kind, allocation.start_commit) == ("checkout", first)
    assert allocation.branch is None
    placer.make(allocation, "look")
    path = placer.calls / "look.1"
    assert worktree_head(path) == (None, first)
    assert (path / "a.txt").read_text() == "a\n"
    # the branch libgit2 needed to add it is gone: a checkout leaves no branch
    assert not [name for name in repo.references if name.startswith("refs/heads/crw/")]


def test_a_qa_capture_call_gets_the_scratch_worktree(
    repo: pygit2.Repository, tmp_path: Path
) -> None:
    """spec: STEP-5"""
    placer = placer_of(repo, tmp_path)
    for role in ("executor", "reviewer"):
        allocation = placer.allocate(f"{role}-qa.1", "qa", role, "capture")
        assert allocation.kind == "scratch"
        assert allocation.start_commit == str(repo.head.target)
        assert allocation.branch == f"refs/heads/crw/{RUN}/{role}-qa.1"
        placer.make(allocation, "qa")
        assert worktree_head(placer.calls / f"{role}-qa.1") == (
            allocation.branch,
            str(repo.head.target),
        )


def test_a_run_without_a_repository_gets_plain_directories(tmp_path: Path) -> None:
    """spec: STEP-1"""
    placer = Placer(RUN, None, None, tmp_path / "calls")
    allocation = placer.allocate("build.1", "build", "executor", None)
    assert allocation == Allocation(workspace=str(tmp_path / "calls" / "build.1"), kind="directory")
    placer.make(allocation, "build")
    assert (tmp_path / "calls" / "build.1").is_dir()
    assert not (tmp_path / "calls" / "build.1" / ".git").exists()


def test_a_p_that_exists_is_kept_as_it_is(repo: pygit2.Repository, tmp_path: Path) -> None:
    """spec: ATT-15"""
    placer = placer_of(repo, tmp_path)
    allocation = placer.allocate("build.1", "build", "executor", None)
    placer.make(allocation, "build")
    path = placer.calls / "build.1"
    (path / "a.txt").write_text("the first attempt's edit\n")
    placer.make(allocation, "build")  # the next attempt, or a resumed process
    assert (path / "a.txt").read_text() == "the first attempt's edit\n"
    assert worktree_head(path)[1] == allocation.start_commit


def _crash(crash: str, repo: pygit2.Repository, placer: Placer, allocation: Allocation) -> None:
    """Leave what a process that died at `crash` leaves between the prepared row
    and P made."""
    path = Path(str(allocation.workspace))
    temporary = f"refs/heads/crw/{RUN}/checkout-{worktree_name(RUN, path)}"
    start = pygit2.Oid(hex=str(allocation.start_commit))
    if (
        crash in ("branch_only", "empty_directory", "not_detached", "head_lock", "p_half_removed")
        or crash in HALF_MADE
    ):
        ref = repo.references.create(allocation.branch or temporary, start)
    if crash == "empty_directory":  # libgit2 made P, then the process died
        path.mkdir(parents=True)
    if crash == "not_detached":  # a checkout added, its HEAD not detached yet
        path.parent.mkdir(parents=True, exist_ok=True)
        repo.add_worktree(worktree_name(RUN, path), str(path), ref)
    if crash == "head_lock":  # a checkout added, killed inside the detach of its HEAD
        path.parent.mkdir(parents=True, exist_ok=True)
        repo.add_worktree(worktree_name(RUN, path), str(path), ref)
        record = Path(repo.path) / "worktrees" / worktree_name(RUN, path)
        (record / "HEAD.lock").write_text(f"{start}\n")
    if crash == "branch_lock":  # killed while libgit2 wrote the branch: its lock stays
        lock = Path(repo.path) / f"{allocation.branch or temporary}.lock"
        lock.parent.mkdir(parents=True, exist_ok=True)
        lock.write_text(f"{start}\n")
    if crash == "record_only":  # P made, then deleted: the repository's record stays
        placer.make(allocation, "n")
        shutil.rmtree(path)
    if crash == "p_half_removed":  # a half-made P being removed: its .git file went first
        path.parent.mkdir(parents=True, exist_ok=True)
        repo.add_worktree(worktree_name(RUN, path), str(path), ref)
        (Path(repo.path) / "worktrees" / worktree_name(RUN, path) / "index").unlink()
        (path / ".git").unlink()
    if crash in HALF_MADE:  # libgit2's add cut where HALF_MADE says
        path.parent.mkdir(parents=True, exist_ok=True)
        repo.add_worktree(worktree_name(RUN, path), str(path), ref)
        record = Path(repo.path) / "worktrees" / worktree_name(RUN, path)
        for name in HALF_MADE[crash]:
            (record / name).unlink()
        if crash == "record_directory":
            shutil.rmtree(path)
        else:
            (path / "a.txt").unlink()  # the checkout had not written it yet


HALF_MADE = {
    "record_directory": ["commondir", "gitdir", "HEAD", "index"],
    "git_file_only": ["commondir", "gitdir", "HEAD", "index"],
    "record_no_head": ["HEAD", "index"],
    "checkout_cut": ["index"],
}
"""A worktree libgit2's add left half made (it writes, in order: the record's
directory `.git/worktrees/<name>`, P, P's `.git` file, the record's commondir,
gitdir and HEAD, the checked-out files, the record's index): the record files
a crash point lacks (P opens as a repository only from HEAD on)."""


CRASHES = (
    "nothing",
    "branch_only",
    "branch_lock",
    "empty_directory",
    "record_only",
    "not_detached",
    "head_lock",
    "p_half_removed",
    *HALF_MADE,
)
CASES = [
    (crash, role)
    for crash in CRASHES
    for role in ("executor", "reviewer")
    if (crash, role) != ("head_lock", "executor")
]
"""Each crash point on an executor's worktree and a reviewer's checkout; a HEAD's
lock on the checkout only: crw never moves an executor's worktree HEAD, so no kill
leaves its lock."""


@pytest.mark.parametrize(("crash", "role"), CASES)
def test_every_crash_point_before_p_is_made_resumes_to_the_same_p(
    tmp_path: Path, role: str, crash: str
) -> None:
    """spec: STEP-2, ATT-15"""
    outcomes = []
    for name in ("clean", crash):
        repo = make_repo(tmp_path / name / "repo", {"a.txt": "a\n"})
        placer = placer_of(repo, tmp_path / name)
        allocation = placer.allocate("n.1", "n", role, None)  # the prepared row's
        path = placer.calls / "n.1"
        if name != "clean":
            _crash(crash, repo, placer, allocation)
        placer.make(allocation, "n")  # the resumed process
        placer.make(allocation, "n")  # and again: idempotent
        branches = sorted(n for n in repo.references if n.startswith("refs/heads/crw/"))
        outcomes.append(
            (
                worktree_head(path),
                sorted(p.name for p in path.iterdir()),
                repo.list_worktrees(),
                branches,
                pygit2.Repository(str(path)).status(),
                (Path(pygit2.Repository(str(path)).path) / "HEAD.lock").exists(),
            )
        )
    assert outcomes[0] == outcomes[1]


def test_a_worktree_whose_record_is_gone_is_refused_with_its_fix(
    repo: pygit2.Repository, tmp_path: Path
) -> None:
    """spec: STEP-2; P's .git file names a record of the repository that is gone
    (no crash point of crw's leaves it: a half-made P goes before its record), which
    libgit2 cannot open: refused with one line naming P, the record and the fix"""
    placer = placer_of(repo, tmp_path)
    allocation = placer.allocate("build.1", "build", "executor", None)
    placer.make(allocation, "build")
    path = placer.calls / "build.1"
    record = Path(repo.path) / "worktrees" / worktree_name(RUN, path)
    shutil.rmtree(record)
    with pytest.raises(RefusedError) as refused:
        placer.make(allocation, "build")
    assert str(refused.value) == (
        f"the call directory {path} is a git worktree whose record {record} is gone; "
        "move the directory away, then resume the run"
    )
    assert (path / ".git").is_file()


def test_a_p_holding_files_but_no_worktree_is_refused(
    repo: pygit2.Repository, tmp_path: Path
) -> None:
    """spec: STEP-2"""
    placer = placer_of(repo, tmp_path)
    allocation = placer.allocate("build.1", "build", "executor", None)
    path = placer.calls / "build.1"
    path.mkdir(parents=True)
    (path / "stray.txt").write_text("x")
    with pytest.raises(RefusedError, match=r"build\.1 holds files but no git worktree; move"):
        placer.make(allocation, "build")
    assert (path / "stray.txt").read_text() == "x"


def test_release_removes_the_worktree_and_keeps_a_branch_holding_commits(
    repo: pygit2.Repository, tmp_path: Path
) -> None:
    """spec: ATT-15"""
    placer = placer_of(repo, tmp_path)
    build = placer.allocate("build.1", "build", "executor", None)
    look = placer.allocate("look.1", "look", "explorer", None)
    fix = placer.allocate("fix.1", "fix", "executor", None)
    for allocation, node in ((build, "build"), (look, "look"), (fix, "fix")):
        placer.make(allocation, node)
    moved = commit_files(placer.calls / "fix.1", {"f.txt": "f\n"}, "stray")
    for allocation, node in ((build, "build"), (look, "look"), (fix, "fix")):
        placer.release(allocation, node)
        placer.release(allocation, node)  # again: nothing left to do
    assert not placer.calls.exists() or not list(placer.calls.iterdir())
    assert repo.list_worktrees() == []
    assert [n for n in repo.references if n.startswith("refs/heads/crw/")] == [fix.branch]
    assert str(repo.references[str(fix.branch)].target) == moved


def test_a_deleted_worktree_is_restored_at_its_recorded_start(
    repo: pygit2.Repository, tmp_path: Path
) -> None:
    """spec: STEP-3, ATT-15"""
    placer = placer_of(repo, tmp_path)
    allocation = placer.allocate("build.1", "build", "executor", None)
    placer.make(allocation, "build")
    path = placer.calls / "build.1"
    commit_files(tmp_path / "repo", {"later.txt": "later\n"}, "the main branch moves on")
    shutil.rmtree(path)
    placer.make(allocation, "build")
    assert worktree_head(path) == (allocation.branch, allocation.start_commit)
    assert not (path / "later.txt").exists()


def test_a_restored_executor_worktree_is_at_the_nodes_last_crw_commit(
    repo: pygit2.Repository, tmp_path: Path
) -> None:
    """spec: STEP-3"""
    placer = placer_of(repo, tmp_path)
    allocation = placer.allocate("build.1", "build", "executor", None)
    placer.make(allocation, "build")
    path = placer.calls / "build.1"
    # crw.commit after the allocation: the node ref moves to a child of the start
    start = repo[str(allocation.start_commit)].peel(pygit2.Commit)
    tree = repo.TreeBuilder(start.tree)
    tree.insert("done.txt", repo.create_blob(b"done\n"), pygit2.GIT_FILEMODE_BLOB)
    sig = pygit2.Signature("crw", "crw@example.invalid")
    done = repo.create_commit(
        node_ref(RUN, "build"), sig, sig, "crw.commit", tree.write(), [start.id]
    )
    assert worktrees.expected_commit(placer.repository or "", RUN, "build", allocation) == str(done)
    shutil.rmtree(path)
    placer.make(allocation, "build")
    assert worktree_head(path) == (allocation.branch, str(done))
    assert (path / "done.txt").read_text() == "done\n"


def test_allocation_of_reads_the_newest_prepared_row() -> None:
    """spec: ATT-15"""
    rows: list[dict[str, Any]] = [
        {"row": "prepared", "call": "b.1", "allocation": {"workspace": "/p", "kind": "worktree"}},
        {"row": "step_published", "call": "b.1"},
    ]
    assert allocation_of(rows) == Allocation(workspace="/p", kind="worktree")
    assert allocation_of(rows[1:]) is None


def test_removing_a_run_releases_its_worktrees_first(
    repo: pygit2.Repository, tmp_path: Path
) -> None:
    """spec: ATT-15"""
    state = tmp_path / "state"
    run = RunDir(state / "flow" / RUN)
    run.create()
    root = str(Path(str(repo.workdir)).resolve())
    spec = RunSpec(
        id=RUN,
        workflow=WorkflowRef(path=str(tmp_path / "wf.toml"), digest="sha256:0"),
        backend="session",
        pool=1,
        repository=root,
        head=str(repo.head.target),
    )
    write_run_spec(run.run_json, spec)
    placer = Placer(RUN, root, spec.head, run.calls)
    allocation = placer.allocate("build.1", "build", "executor", None)
    append_row(run, Prepared(call="build.1", node="build", role="executor", allocation=allocation))
    placer.make(allocation, "build")
    assert repo.list_worktrees() == [worktree_name(RUN, run.calls / "build.1")]
    assert rm_command(RUN, state=str(state), json=True) == 0
    assert not run.root.exists()
    assert repo.list_worktrees() == []
    assert [n for n in repo.references if n.startswith("refs/heads/crw/")] == []
