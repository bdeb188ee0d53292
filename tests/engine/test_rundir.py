"""The state directory and the run directory."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

import pygit2
import pytest

from crw.engine.run.rundir import RunDir, find_run, list_runs, new_run_id, resolve_state
from crw.errors import InputError, RefusedError


def test_state_option_wins(tmp_path: Path) -> None:
    environ = {"CRW_STATE": "/env/state"}
    assert resolve_state("/opt/state", environ, tmp_path) == Path("/opt/state")


def test_state_from_environment_when_no_option(tmp_path: Path) -> None:
    assert resolve_state(None, {"CRW_STATE": "/env/state"}, tmp_path) == Path("/env/state")


def test_relative_state_is_taken_from_cwd(tmp_path: Path) -> None:
    assert resolve_state("st", {}, tmp_path) == tmp_path / "st"
    assert resolve_state(None, {"CRW_STATE": "st"}, tmp_path) == tmp_path / "st"


def test_state_defaults_to_the_repository_root(tmp_path: Path) -> None:
    pygit2.init_repository(str(tmp_path / "repo"))
    deep = tmp_path / "repo" / "a" / "b"
    deep.mkdir(parents=True)
    assert resolve_state(None, {"CRW_STATE": ""}, deep) == tmp_path / "repo" / ".crw"


def test_state_outside_a_repository_is_under_cwd(tmp_path: Path) -> None:
    if pygit2.discover_repository(str(tmp_path)) is not None:
        pytest.skip("the test's temporary directory is inside a git repository")
    assert resolve_state(None, {}, tmp_path) == tmp_path / ".crw"


def test_run_dir_names_its_files(tmp_path: Path) -> None:
    run = RunDir.of(tmp_path, "r1")
    assert run.root == tmp_path / "flow" / "r1"
    assert run.id == "r1"
    names = [
        run.run_json,
        run.journal,
        run.steps,
        run.inbox,
        run.replies,
        run.outbox,
        run.run_lock,
        run.start_lock,
        run.log,
        run.process_lock("ab"),
    ]
    assert [p.name for p in names] == [
        "run.json",
        "journal.jsonl",
        "steps",
        "inbox",
        "replies",
        "outbox",
        "run.lock",
        "start.lock",
        "run.log",
        "process.ab.lock",
    ]
    assert {p.parent for p in names} == {run.root}


def test_create_makes_the_tree_once(tmp_path: Path) -> None:
    run = RunDir.of(tmp_path / "state", "r1")
    assert not run.exists()
    run.create()
    assert run.exists()
    assert all(d.is_dir() for d in (run.steps, run.inbox, run.replies, run.outbox))
    with pytest.raises(RefusedError, match="exists already"):
        run.create()


def test_create_under_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(RefusedError, match="cannot make run directory"):
        RunDir.of(tmp_path / "file", "r1").create()


def test_new_run_id_is_one_path_segment() -> None:
    now = datetime(2026, 11, 29, 19, 35, 51)
    run_id = new_run_id("fix-issue", now)
    assert re.fullmatch(r"fix-issue-20261129-193551-[0-9a-f]{4}", run_id)
    odd = new_run_id("../a b/c", now)
    assert "/" not in odd
    assert re.fullmatch(r"a-b-c-20261129-193551-[0-9a-f]{4}", odd)
    assert new_run_id("", now).startswith("run-")


def test_find_run_by_id_or_path(tmp_path: Path) -> None:
    run = RunDir.of(tmp_path, "r1")
    run.create()
    run.run_json.write_text("{}")
    assert find_run(tmp_path, "r1") == run
    assert find_run(tmp_path / "elsewhere", str(run.root)) == run


def test_unknown_run_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError) as caught:
        find_run(tmp_path, "nope")
    flow = tmp_path / "flow"
    assert str(caught.value) == (
        f'run "nope" not found under {flow}; list the runs with: crw flow list --state {tmp_path}'
    )


def test_a_directory_without_run_json_is_no_run_by_path(tmp_path: Path) -> None:
    with pytest.raises(InputError):
        find_run(tmp_path, str(tmp_path))


def test_list_runs(tmp_path: Path) -> None:
    """Runs only: no file, and no directory a removal or a resume from the database
    keeps out of the way (`.removed-…`, `.resuming-…`: no run id starts with a dot)."""
    assert list_runs(tmp_path) == []
    for name in ("b", "a"):
        RunDir.of(tmp_path, name).create()
    (tmp_path / "flow" / "stray.txt").write_text("")
    for aside in (".removed-a-00ff", ".resuming-c-1a2b"):
        (tmp_path / "flow" / aside).mkdir()
    assert list_runs(tmp_path) == ["a", "b"]
    assert not new_run_id(".hidden", datetime(2026, 12, 6, tzinfo=UTC)).startswith(".")


@pytest.mark.parametrize("run", ["", "a" * 256, "a" * 5000, "a/" * 3000, "r\n1", "r\x001", "r\x7f"])
def test_run_that_no_path_can_hold_is_one_line_input_error(tmp_path: Path, run: str) -> None:
    RunDir.of(tmp_path, "r1").create()
    with pytest.raises(InputError) as caught:
        find_run(tmp_path, run)
    message = str(caught.value)
    # Short whatever the state directory's path (an xdist worker's is longer).
    short = message.replace(str(tmp_path), "")
    assert "\n" not in message and "\x00" not in message and len(short) < 200
    assert message.endswith(f"list the runs with: crw flow list --state {tmp_path}")


def test_a_run_directorys_paths_are_made_once(tmp_path: Path) -> None:
    """A session run's actors ask for steps/, inbox/ and replies/ at every step,
    reply and sweep: each path is joined once per RunDir, not at every ask."""
    run = RunDir.of(tmp_path, "r1")
    for name in ("run_json", "journal", "steps", "inbox", "replies", "outbox", "calls"):
        assert getattr(run, name) is getattr(run, name), name
    assert run.steps == tmp_path / "flow" / "r1" / "steps"
    assert run == RunDir.of(tmp_path, "r1") and hash(run) == hash(RunDir.of(tmp_path, "r1"))
