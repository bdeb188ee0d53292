"""A run's state directory inside a git checkout is added to the repository's
`info/exclude` at start, once, so `git status` shows no untracked `.crw/`: real
`crw flow start` processes in real repositories (pygit2), a linked worktree's
common directory included; never when the state is outside the checkout."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from crw.workspace.exclude import exclude_state
from tests.cli.conftest import Crw
from tests.workspace.gitrepo import attempt_worktree, make_repo, status_of
from tests.workspace.test_repo import workflow_file


@pytest.fixture
def runners(crw: Crw) -> Iterator[list[Crw]]:
    """Runners with their state elsewhere, each reaped at teardown."""
    made: list[Crw] = []
    yield made
    for runner in made:
        runner.reap()


def _runner(crw: Crw, runners: list[Crw], state: Path) -> Crw:
    runner = Crw(state, Path(crw.env["TMPDIR"]))
    runner.env = crw.env
    runners.append(runner)
    return runner


def _start(runner: Crw, workflow: Path) -> None:
    result = runner.start(str(workflow), "--backend", "app-server")
    assert result.code == 0, result.stderr
    assert not result.json()["warnings"], result.json()["warnings"]


def _exclude(git_dir: Path) -> list[str]:
    return (git_dir / "info" / "exclude").read_text().splitlines()


def test_a_start_in_a_checkout_excludes_its_state_once(
    crw: Crw, runners: list[Crw], tmp_path: Path
) -> None:
    """`.crw/` at the checkout's root: after a start, git status is clean and the
    exclude holds `/.crw/` once, a second start adds nothing."""
    root = tmp_path / "project"
    make_repo(root)
    workflow = workflow_file(root / "flows", 'repo = ".."\n')
    status = status_of(root)
    runner = _runner(crw, runners, root / ".crw")
    _start(runner, workflow)
    assert _exclude(root / ".git").count("/.crw/") == 1
    assert status_of(root) == status  # the workflow file only: no .crw/
    _start(runner, workflow)
    assert _exclude(root / ".git").count("/.crw/") == 1
    assert len(list((root / ".crw" / "flow").iterdir())) == 2


def test_a_linked_worktree_excludes_in_the_common_directory(
    crw: Crw, runners: list[Crw], tmp_path: Path
) -> None:
    """A state directory below a linked worktree's root: the line is its path from
    that root, in the common repository's info/exclude (git reads no other)."""
    repo = make_repo(tmp_path / "project")
    linked = attempt_worktree(repo, tmp_path / "linked", "side", str(repo.head.target))
    workflow = workflow_file(tmp_path / "flows", f'repo = "{linked}"\n')
    (linked / "build").mkdir()  # the runner's working directory
    runner = _runner(crw, runners, linked / "build" / "state")
    _start(runner, workflow)
    assert "/build/state/" in _exclude(tmp_path / "project" / ".git")
    assert status_of(linked) == {}


def test_a_state_outside_the_checkout_or_ignored_already_adds_nothing(
    crw: Crw, tmp_path: Path
) -> None:
    """The run's repository named by the workflow, its state elsewhere: the
    exclude is left as it was. A state git ignores already (.gitignore) adds
    nothing either; the checkout's root itself is never excluded."""
    root = tmp_path / "project"
    make_repo(root, {".gitignore": "ignored/\n"})
    before = _exclude(root / ".git")
    _start(crw, workflow_file(tmp_path / "flows", f'repo = "{root}"\n'))
    assert _exclude(root / ".git") == before
    (root / "ignored" / "state").mkdir(parents=True)
    assert exclude_state(root / "ignored" / "state") is None
    assert exclude_state(root) is None
    assert _exclude(root / ".git") == before


def test_an_exclude_that_cannot_be_written_is_a_warning(tmp_path: Path) -> None:
    """A file that cannot be opened (a directory in its place: root writes any
    file) is a warning naming the line to add; a file without a last newline gets
    the line on a line of its own."""
    root = tmp_path / "project"
    make_repo(root)
    (root / ".crw").mkdir()
    exclude = root / ".git" / "info" / "exclude"
    exclude.unlink(missing_ok=True)
    exclude.mkdir()
    warning = exclude_state(root / ".crw")
    assert warning is not None and warning.startswith(f"cannot add /.crw/ to {exclude} (")
    assert warning.endswith("git status shows .crw/ untracked; add that line to the file yourself")
    exclude.rmdir()
    exclude.write_text("# no newline at the end")
    assert exclude_state(root / ".crw") is None
    assert exclude.read_text() == "# no newline at the end\n/.crw/\n"
