"""`crw flow demo --git`: an executor under review edits a sample git repository.

Each test runs the demo as a user does (a real `crw` process); every pid it
reports (the simulated host, the run process) is reaped at teardown.
"""

from __future__ import annotations

import re
from pathlib import Path

import pygit2
import pytest

from crw.cli.demo.demo_git import BUILD_WRITES, FIX_WRITES, SAMPLE
from crw.journal.log import read_journal
from tests.cli.conftest import Crw
from tests.cli.test_demo import _assert_stopped, _demo
from tests.workspace.gitrepo import files_at

ROUND = [
    ("build.2", "review", "reject", None),
    ("build.3", "fix", None, "build.1"),
    ("build.4", "review", "accept", None),
]


@pytest.mark.parametrize("backend", ["session", "app-server"])
def test_git_demo_runs_an_executor_under_review_in_a_sample_repository(
    crw: Crw, backend: str
) -> None:
    result = _demo(crw, "--git", "--backend", backend, "--json")
    assert result.code == 0, result.stderr
    out = result.json()
    assert (out["state"], out["ended_status"], out["backend"]) == ("ended", "completed", backend)
    assert [(c["call"], c["role"], c["state"]) for c in out["calls"]] == [
        ("build.1", "executor", "completed"),
        ("build.2", "reviewer", "completed"),
        ("build.3", "executor", "completed"),
        ("build.4", "reviewer", "completed"),
    ]
    assert [(r["call"], r["kind"], r.get("verdict"), r.get("resume")) for r in out["reviews"]] == (
        ROUND
    )
    git = out["git"]
    sample = crw.state / "sample"
    repo = pygit2.Repository(str(sample))
    assert git["repository"] == str(sample.resolve())
    assert git["main"] == git["start"] == str(repo.head.target)  # the run left main alone
    assert files_at(repo, "main") == SAMPLE
    # Each call worked where its allocation says: the executor and its fix in one
    # worktree of the sample, each review in a checkout of its own; all released.
    work = {w["call"]: w for w in git["workspaces"]}
    assert [(w["call"], w["kind"], w["exists"]) for w in git["workspaces"]] == [
        ("build.1", "worktree", False),
        ("build.2", "checkout", False),
        ("build.3", "worktree", False),
        ("build.4", "checkout", False),
    ]
    assert work["build.3"]["workspace"] == work["build.1"]["workspace"]
    assert repo.list_worktrees() == []
    # The node branch holds the work: one crw.commit per executor call, in order.
    rows = read_journal(Path(out["run_dir"]) / "journal.jsonl").rows
    commits = [r for r in rows if r["row"] == "crw_commit"]
    ref = f"refs/crw/flow/{out['run']}/nodes/build"
    assert [(r["call"], r["node"], r["node_ref"]) for r in commits] == [
        ("build.1", "build", ref),
        ("build.3", "build", ref),
    ]
    assert [r.get("node_old") for r in commits] == [None, commits[0]["commit"]]
    assert git["node_ref"] == ref and git["refs"] == [ref]  # no stray ref: nobody committed
    branch = git["branch"]
    assert branch["commit"] == commits[1]["commit"] == str(repo.references[ref].target)
    assert [c["commit"] for c in branch["history"]] == [r["commit"] for r in commits]
    assert files_at(repo, commits[0]["commit"]) == SAMPLE | BUILD_WRITES
    assert files_at(repo, ref) == SAMPLE | BUILD_WRITES | FIX_WRITES
    assert branch["files"] == [
        {"path": "src/greet.py", "status": "M"},
        {"path": "tests/test_greet.py", "status": "A"},
    ]
    pending = {r["call"]: r.get("pending_tree") for r in rows if r["row"] == "completed"}
    assert [pending[r["call"]] for r in commits] == [r["tree"] for r in commits]
    _assert_stopped(crw, out)


def test_git_demo_prints_the_node_branch_its_commits_and_changed_files(crw: Crw) -> None:
    result = _demo(crw, "--git")
    assert result.code == 0, result.stderr
    lines = result.stdout.splitlines()
    sample = (crw.state / "sample").resolve()
    assert lines[0].startswith("crw flow demo --git: state ")
    assert lines[1].startswith(f"  sample repository {sample} (main at ")
    tail = lines[next(i for i, line in enumerate(lines) if line.startswith("run ended")) + 1 :]
    assert tail[0] == ""
    assert tail[1].startswith(f"sample repository {sample} (main at ")
    assert re.fullmatch(
        r"node branch refs/crw/flow/git-demo-\S+/nodes/build at [0-9a-f]{40}", tail[2]
    )
    # One line per crw.commit on the branch, oldest first: its short id and title.
    assert [re.fullmatch(r"  [0-9a-f]{12} (.+)", line) is not None for line in tail[3:5]] == [
        True,
        True,
    ]
    assert ["build.1" in tail[3], "build.3" in tail[4]] == [True, True]
    assert tail[6:8] == ["    M src/greet.py", "    A tests/test_greet.py"]
    assert tail[8] == "where the calls worked:"
    assert [line.split()[:3] for line in tail[9:13]] == [
        ["build.1", "executor:", "worktree"],
        ["build.2", "reviewer:", "checkout"],
        ["build.3", "executor:", "worktree"],
        ["build.4", "reviewer:", "checkout"],
    ]
    assert tail[-1] == "main unchanged"


def test_git_demo_refuses_the_real_codex_host(crw: Crw) -> None:
    result = crw("flow", "demo", "--git", "--host", "codex", "--backend", "app-server")
    assert result.code == 2
    assert "--git runs on the simulated host only" in result.stderr
    assert not crw.state.exists()
