"""What crw makes is the user's alone whatever the umask (`crw.private`): every
directory `make_dirs` makes is 0700, every file `open_file` makes 0600, the
locks' files 0600, and a state directory others may write is named by a warning."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from crw.binding.owner import LOCK_NAME, _flow_bound_lock, flow_bound_dir
from crw.engine.run.locks import hold_run, start_lock
from crw.engine.run.rundir import RunDir, loose_state
from crw.private import loose, make_dirs, open_file, write_atomic
from tests.umask import umask_set

UMASKS = [
    pytest.param(0o000, id="umask-000"),
    pytest.param(0o022, id="umask-022"),
    pytest.param(0o277, id="umask-277"),
]


@pytest.fixture(params=UMASKS)
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    with umask_set(request.param):
        yield request.param


_WHY = "another user could remove or replace what crw keeps there; make it private with:"


def mode(path: Path) -> int:
    return path.stat().st_mode & 0o7777


def test_make_dirs_makes_every_missing_directory_0700(tmp_path: Path, umask: int) -> None:
    make_dirs(tmp_path / "a" / "b" / "c")
    for made in (tmp_path / "a", tmp_path / "a" / "b", tmp_path / "a" / "b" / "c"):
        assert mode(made) == 0o700, made


def test_make_dirs_leaves_a_directory_there_as_it_is(tmp_path: Path) -> None:
    there = tmp_path / "there"
    there.mkdir()
    there.chmod(0o755)
    make_dirs(there / "new")
    make_dirs(there)
    assert mode(there) == 0o755 and mode(there / "new") == 0o700


def test_make_dirs_refuses_a_file_in_the_way(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(FileExistsError):
        make_dirs(tmp_path / "file")
    with pytest.raises(NotADirectoryError):
        make_dirs(tmp_path / "file" / "below" / "deeper")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    with pytest.raises(FileExistsError):
        make_dirs(tmp_path / "dangling")


def test_open_file_makes_a_file_0600_and_keeps_the_mode_of_one_there(
    tmp_path: Path, umask: int
) -> None:
    os.close(open_file(tmp_path / "new", os.O_WRONLY | os.O_APPEND))
    assert mode(tmp_path / "new") == 0o600
    there = tmp_path / "there"
    there.write_text("x")
    there.chmod(0o640)
    fd = open_file(there, os.O_WRONLY | os.O_APPEND)
    os.write(fd, b"y")
    os.close(fd)
    assert mode(there) == 0o640 and there.read_text() == "xy"


def test_the_locks_files_are_0600(tmp_path: Path, umask: int) -> None:
    """The process lock and the run lock (filelock), the start lock (handed on a
    descriptor) and the flow-bound lock: 0600, not 0666 less the umask."""
    state = tmp_path / "state"
    run = RunDir.of(state, "r1")
    run.create()
    with start_lock(run) as held:
        assert mode(held.path) == 0o600
    with hold_run(run) as process:
        assert process is not None
        assert mode(process.path) == 0o600 and mode(run.run_lock) == 0o600
    with _flow_bound_lock(state):
        assert mode(flow_bound_dir(state)) == 0o700
        assert mode(flow_bound_dir(state) / LOCK_NAME) == 0o600


def test_a_run_made_in_a_missing_state_directory_makes_it_and_its_flow_0700(
    tmp_path: Path, umask: int
) -> None:
    state = tmp_path / "deep" / "state"
    RunDir.of(state, "r1").create()
    for made in (tmp_path / "deep", state, state / "flow", state / "flow" / "r1"):
        assert mode(made) == 0o700, made


@pytest.mark.parametrize("bits", [0o777, 0o770, 0o702])
def test_loose_names_a_directory_others_may_write_and_the_fix(tmp_path: Path, bits: int) -> None:
    tmp_path.chmod(bits)
    try:
        why = loose("the state directory", tmp_path)
    finally:
        tmp_path.chmod(0o700)
    assert why == (
        f"the state directory {tmp_path} is writable by group or others (mode {bits:o}): "
        "another user could remove or replace what crw keeps there; make it private "
        f"with: chmod 700 {tmp_path}"
    )


def test_loose_says_nothing_of_a_private_or_read_only_directory_a_file_or_none(
    tmp_path: Path,
) -> None:
    (tmp_path / "file").write_text("x")
    (tmp_path / "file").chmod(0o666)
    (tmp_path / "readable").mkdir(mode=0o755)
    (tmp_path / "readable").chmod(0o755)
    for path in (tmp_path, tmp_path / "readable", tmp_path / "file", tmp_path / "missing"):
        assert loose("it", path) is None, path


def test_loose_state_names_the_state_directory_and_its_flow(tmp_path: Path) -> None:
    state = tmp_path / "state"
    (state / "flow").mkdir(parents=True)
    assert loose_state(state) == []
    state.chmod(0o777)
    (state / "flow").chmod(0o775)
    try:
        warnings = loose_state(state)
    finally:
        state.chmod(0o700)
    assert [w.split(" is writable")[0] for w in warnings] == [
        f"the state directory {state}",
        f"the runs' directory {state / 'flow'}",
    ]
    flow = state / "flow"
    assert warnings[1].endswith(f"(mode 775): {_WHY} chmod 700 {flow}")


def test_a_journal_made_again_is_0600(tmp_path: Path, umask: int) -> None:
    """A journal the run process opens where it went missing (it was 0644)."""
    from crw.journal.log import JournalFile

    JournalFile.open(tmp_path / "journal.jsonl").close()
    assert mode(tmp_path / "journal.jsonl") == 0o600


def test_an_evidence_records_directories_under_the_cwd_are_0700(tmp_path: Path, umask: int) -> None:
    from crw.workspace.evidence import record_path, write_record

    """The record's directories under the run's cwd (which is the user's, left
    as it is) are 0700, as the record is 0600 (they took the umask's mode)."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    record = record_path(str(cwd), "r1", "build.1")
    write_record(record, {"call": "build.1"})
    assert mode(record) == 0o600
    made = record.parent
    while made != cwd:
        assert mode(made) == 0o700, made
        made = made.parent


def test_a_file_the_user_names_gets_the_umasks_mode_even_over_a_left_temporary(
    tmp_path: Path,
) -> None:
    out = tmp_path / "t.svg"
    left = tmp_path / ".t.svg.tmp"
    left.write_bytes(b"half")
    left.chmod(0o600)  # what a write cut short left, made private
    with umask_set(0o022):
        write_atomic(out, b"<svg/>", durable=False, private=False)
    assert (out.read_bytes(), out.stat().st_mode & 0o777) == (b"<svg/>", 0o644)
    assert not left.exists()
