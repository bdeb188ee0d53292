"""`crw flow start` of a workflow with and without a git repository: the preview's
workspaces and run.json's record of the repository and its head."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli.conftest import Crw
from tests.workspace.gitrepo import make_repo
from tests.workspace.test_repo import workflow_file


def test_start_records_the_repository_and_head_in_run_json(crw: Crw, tmp_path: Path) -> None:
    """spec: STEP-1, STEP-4"""
    repo = make_repo(tmp_path / "project")
    wf = workflow_file(tmp_path / "flows", f'repo = "{tmp_path / "project"}"\n')
    out = crw.start(str(wf), "--backend", "app-server").json()
    root = str((tmp_path / "project").resolve())
    head = str(repo.head.target)
    assert out["workspaces"] == {"kind": "git", "repository": root, "head": head}
    spec = json.loads((crw.state / "flow" / out["run"] / "run.json").read_text())
    assert (spec["repository"], spec["head"]) == (root, head)


def test_start_outside_every_checkout_warns_and_records_no_repository(
    crw: Crw, tmp_path: Path
) -> None:
    """spec: STEP-1"""
    out = crw.start(str(workflow_file(tmp_path / "flows")), "--backend", "app-server").json()
    assert out["workspaces"]["kind"] == "directory"
    assert "no git checkout holds the run" in out["workspaces"]["warning"]
    spec = json.loads((crw.state / "flow" / out["run"] / "run.json").read_text())
    assert spec.get("repository") is None and spec.get("head") is None


def test_a_bad_repo_refuses_the_start_and_writes_nothing(crw: Crw, tmp_path: Path) -> None:
    """spec: STEP-1"""
    wf = workflow_file(tmp_path / "flows", 'repo = "../missing"\n')
    result = crw.start(str(wf), "--backend", "app-server")
    assert result.code != 0
    assert f'{wf}:2: repo = "../missing" is not a git checkout' in result.error()
    assert len(result.error().strip().splitlines()) == 1
    assert not (crw.state / "flow").exists() or not list((crw.state / "flow").iterdir())


@pytest.mark.parametrize("given", ["/etc", "../../../../root", "escape"])
def test_an_evidence_cwd_outside_the_repository_refuses_the_start(
    crw: Crw, tmp_path: Path, given: str
) -> None:
    """The run writes flow evidence records under its evidence cwd: a path outside
    the run's repository and the workflow's directory (a symlink resolved first) is
    refused before anything is written, naming the file, the line and the key.
    spec: STEP-19"""
    make_repo(tmp_path / "project")
    (tmp_path / "project" / "flows").mkdir()
    (tmp_path / "project" / "flows" / "escape").symlink_to("/etc")
    top = f'repo = ".."\nevidence_cwd = "{given}"\n'
    wf = workflow_file(tmp_path / "project" / "flows", top)
    result = crw.start(str(wf), "--backend", "app-server")
    assert result.code == 2, result.stderr
    assert result.error().startswith(
        f'crw: error: {wf}:3: evidence_cwd = "{given}" lies outside the run\'s repository '
        f"{(tmp_path / 'project').resolve()} or the workflow's directory {wf.parent.resolve()}"
    )
    assert len(result.error().strip().splitlines()) == 1
    assert not (crw.state / "flow").exists() or not list((crw.state / "flow").iterdir())


def test_an_evidence_cwd_inside_the_repository_starts(crw: Crw, tmp_path: Path) -> None:
    """spec: STEP-19"""
    make_repo(tmp_path / "project")
    wf = workflow_file(tmp_path / "project" / "flows", 'repo = ".."\nevidence_cwd = ".."\n')
    assert crw.start(str(wf), "--backend", "app-server").code == 0
