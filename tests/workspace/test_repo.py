"""The run's repository: the workflow's repo and head options, the default checkout,
the start preview's line and run.json's record."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pygit2
import pytest

from crw.cli.run.preview import Preview, workspaces
from crw.engine.config.repo import (
    RunRepository,
    checkout_root,
    may_hold_repository,
    run_repository,
)
from crw.engine.config.workflow import load_workflow
from crw.errors import InputError
from tests.workspace.gitrepo import commit_files, make_repo

NODE = '[[node]]\nid = "build"\nrole = "executor"\ntask = "t"\nschema = { type = "object" }\n'


def workflow_file(directory: Path, top: str = "") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "wf.toml"
    path.write_text(f'name = "wf"\n{top}{NODE}')
    return path


def test_repo_is_taken_relative_to_the_workflow_file(tmp_path: Path) -> None:
    """spec: STEP-4"""
    make_repo(tmp_path / "project")
    path = workflow_file(tmp_path / "project" / "flows", 'repo = ".."\n')
    assert load_workflow(path).repo == (tmp_path / "project").resolve()
    # a directory inside the checkout names the checkout
    (tmp_path / "project" / "src").mkdir()
    path.write_text(f'name = "wf"\nrepo = "../src"\n{NODE}')
    assert load_workflow(path).repo == (tmp_path / "project").resolve()


@pytest.mark.parametrize("value", ["../nowhere", "."])
def test_a_repo_that_is_no_git_checkout_is_one_line_naming_file_option_and_fix(
    tmp_path: Path, value: str
) -> None:
    """spec: STEP-1"""
    path = workflow_file(tmp_path / "plain", f'repo = "{value}"\n')
    with pytest.raises(InputError) as refused:
        load_workflow(path)
    assert str(refused.value) == (
        f'{path}:2: repo = "{value}" is not a git checkout; give the path of one, relative '
        "to the workflow file, or leave repo out for the checkout the run is started from"
    )


def test_the_default_repository_is_the_checkout_holding_the_state_directory(
    tmp_path: Path,
) -> None:
    """spec: STEP-4"""
    repo = make_repo(tmp_path / "project")
    wf = workflow_file(tmp_path / "elsewhere")
    found = run_repository(None, None, tmp_path / "project" / ".crw", wf)
    assert found == RunRepository(str((tmp_path / "project").resolve()), str(repo.head.target))
    # a state directory outside every checkout: no repository, plain directories
    assert run_repository(None, None, tmp_path / "state", wf) == RunRepository()
    assert checkout_root(tmp_path / "state") is None


def test_the_head_option_is_resolved_to_a_commit_at_start(tmp_path: Path) -> None:
    """spec: STEP-4"""
    repo = make_repo(tmp_path / "project")
    first = str(repo.head.target)
    repo.references.create("refs/tags/v1", pygit2.Oid(hex=first))
    commit_files(tmp_path / "project", {"b.txt": "b\n"}, "second")
    wf = workflow_file(tmp_path)
    root = (tmp_path / "project").resolve()
    assert run_repository(root, "v1", tmp_path / "s", wf).head == first
    assert run_repository(root, None, tmp_path / "s", wf).head == str(repo.head.target)
    with pytest.raises(InputError) as refused:
        run_repository(root, "no-such-ref", tmp_path / "s", wf)
    assert str(refused.value) == (
        f'{wf}: head = "no-such-ref" names no commit of the repository {root}; give a '
        "branch, tag or commit of it, or leave head out for its HEAD"
    )


def test_the_preview_says_when_the_calls_work_in_plain_directories() -> None:
    """spec: STEP-1"""
    plain = Preview(workspaces=workspaces(None, None))
    assert plain.lines()[-2:] == [
        "  workspaces: warning",
        "      - no git checkout holds the run: every call works in a plain directory under "
        "the run (no worktrees, no node branches); start it from a checkout, or set "
        'repo = "PATH" in the workflow',
    ]
    git = Preview(workspaces=workspaces("/src/project", "0123456789abcdef"))
    assert git.lines()[-1] == "  workspaces: git worktrees of /src/project at 0123456789ab"


def test_git_is_looked_for_only_where_a_repository_may_be(tmp_path: Path) -> None:
    """`may_hold_repository` is True wherever libgit2's discovery finds a repository
    (a checkout, a directory in it, a linked worktree's `.git` file, a bare
    repository, a symbolic link into a checkout), and False in plain directories,
    where `checkout_root` then answers None without loading git."""
    make_repo(tmp_path / "project")
    (tmp_path / "project" / "src").mkdir()
    pygit2.init_repository(str(tmp_path / "bare.git"), bare=True)
    (tmp_path / "linked").mkdir()
    (tmp_path / "linked" / ".git").write_text(f"gitdir: {tmp_path / 'project' / '.git'}\n")
    (tmp_path / "link").symlink_to(tmp_path / "project" / "src")
    (tmp_path / "plain" / "deep").mkdir(parents=True)
    for where in ("project", "project/src", "bare.git", "linked", "link"):
        assert pygit2.discover_repository(str(tmp_path / where)) is not None, where
        assert may_hold_repository(tmp_path / where), where
    for where in ("plain", "plain/deep"):
        if pygit2.discover_repository(str(tmp_path / where)) is not None:
            pytest.skip("the test's directory is inside a git repository")
        assert not may_hold_repository(tmp_path / where), where
        assert checkout_root(tmp_path / where / "not-yet") is None


def test_a_state_directory_outside_every_checkout_loads_no_git(tmp_path: Path) -> None:
    """The run's repository and the state's exclude line, decided for a state
    directory in plain directories, import no pygit2 (a sixth of a start)."""
    if may_hold_repository(tmp_path):
        pytest.skip("the test's directory is inside a git repository")
    code = (
        "import sys; from pathlib import Path; "
        "from crw.engine.config.repo import run_repository; "
        "from crw.engine.run.rundir import resolve_state; "
        "from crw.workspace.exclude import exclude_state; "
        f"state = Path({str(tmp_path / '.crw')!r}); "
        "print(run_repository(None, None, state, state / 'wf.toml'), exclude_state(state), "
        f"resolve_state(None, {{}}, Path({str(tmp_path)!r})) == state, 'pygit2' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "RunRepository(path=None, head=None) None True False"
