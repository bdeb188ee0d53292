"""`crw flow demo --git`: an executor under review edits a sample git repository.

Each test runs the demo as a user does (a real `crw` process); every pid it
reports (the simulated host, the run process) is reaped at teardown.
"""

from __future__ import annotations

from pathlib import Path

import pygit2
import pytest

from crw.cli.demo_git import BUILD_WRITES, FIX_WRITES, SAMPLE
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
    work = {w["call"]: w for w in git["workspaces"]}
    assert work["build.3"]["workspace"] == work["build.1"]["workspace"]  # one allocation
    p = Path(work["build.1"]["workspace"])
    written = BUILD_WRITES | FIX_WRITES
    assert {name: (p / name).read_text() for name in written} == written
    assert git["node_ref"] == f"refs/crw/flow/{out['run']}/nodes/build"
    # Without the placer and crw.commit the calls run in plain directories and no
    # node branch is made; the report says so.
    assert [w["kind"] for w in git["workspaces"]] == ["directory"] * 4
    assert work["build.1"]["files"] == sorted(written)
    assert (git["branch"], git["refs"]) == (None, [])
    _assert_stopped(crw, out)


def test_git_demo_prints_the_node_branch_or_says_why_there_is_none(crw: Crw) -> None:
    result = _demo(crw, "--git")
    assert result.code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("crw flow demo --git: state ")
    assert f"  sample repository {(crw.state / 'sample').resolve()} (main at " in lines[1]
    tail = lines[next(i for i, line in enumerate(lines) if line.startswith("run ended")) + 1 :]
    assert tail[0] == ""
    assert tail[1].startswith(f"sample repository {(crw.state / 'sample').resolve()}")
    assert tail[2].startswith("node branch refs/crw/flow/git-demo-")
    assert "/nodes/build: none. The calls ran in plain directories" in tail[2]
    assert "    files: src/greet.py, tests/test_greet.py" in tail
    assert tail[-1] == "main unchanged"


def test_git_demo_refuses_the_real_codex_host(crw: Crw) -> None:
    result = crw("flow", "demo", "--git", "--host", "codex", "--backend", "app-server")
    assert result.code == 2
    assert "--git runs on the simulated host only" in result.stderr
    assert not crw.state.exists()
