"""Whether `next` launches a run's process again after a launch that stopped
before its started row (`crw.engine.run.launch_record.holds_launch`, pure), the
stamps it compares, the record's round trip, and what next says and does while
a launch is held back."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from crw.engine.owner.next_state import should_resume
from crw.engine.owner.next_view import next_view
from crw.engine.run.launch_record import (
    LaunchFailure,
    holds_launch,
    launch_files,
    read_failure,
    record_failure,
    stamp,
    stamps,
)
from crw.engine.run.rundir import RunDir
from tests.engine.test_next_view import RUNNING, read

JOURNAL = "/s/flow/r1/journal.jsonl"
FILES = {
    "/s/flow/r1/run.json": (1, 0o100600, 0, 0, 10, 5, 5),
    JOURNAL: (2, 0o100600, 0, 0, 9, 7, 7),
}
REASON = "run r1 stopped: cannot write its journal /s/flow/r1/journal.jsonl: EPERM"


def failure(files: Any = FILES) -> LaunchFailure:
    return LaunchFailure(pid=41, reason=REASON, at="2026-12-06T05:00:00Z", files=files)


def test_a_launch_is_held_back_while_the_files_it_stopped_on_are_unchanged() -> None:
    """No requirement names it yet: the last launch stopped before its started row
    and every file's stamp is the one it left: hold."""
    assert holds_launch(failure(), dict(FILES)) is True


def test_any_changed_stamp_lets_next_launch_again() -> None:
    """No requirement names it yet: a changed size, mtime, ctime (`chattr -i`,
    `chmod`), mode, inode, a file gone or added: launch once more."""
    for index in range(7):
        changed = list(FILES[JOURNAL])
        changed[index] += 1
        assert holds_launch(failure(), FILES | {JOURNAL: tuple(changed)}) is False, index
    assert holds_launch(failure(), FILES | {JOURNAL: ()}) is False
    assert holds_launch(failure(), FILES | {"/s/roles.toml": (3, 0, 0, 0, 1, 1, 1)}) is False


def test_no_record_or_a_record_without_stamps_holds_nothing() -> None:
    """No requirement names it yet: no failed launch, or a record an earlier crw
    wrote (no stamps): next launches as it always did (CMD-NEXT-18)."""
    assert holds_launch(None, FILES) is False
    assert holds_launch(failure(files=None), FILES) is False


def test_next_resumes_nothing_while_a_launch_is_held_back_and_says_until_when() -> None:
    """spec: CMD-NEXT-18 (a run no process holds is resumed, unless its last launch
    stopped on files still as they were): should_resume is False, and the hint
    names the error, the resume to run and what lets next launch again."""
    dead = read(RUNNING, held=False, launch_refused=REASON)
    assert should_resume(dead) is True  # the files changed since: one more launch
    held_back = read(RUNNING, held=False, launch_refused=REASON, launch_held=True)
    assert should_resume(held_back) is False
    hint = next_view(held_back).hint
    assert f"none could start: {REASON}." in hint and "crw flow resume r1 --detach" in hint
    assert hint.endswith(
        "next starts no process for it until its run.json, workflow file, roles.toml "
        "or journal changes."
    )
    assert "next starts no process" not in next_view(dead).hint


def test_the_record_keeps_the_stamps_and_status_shows_pid_reason_at_started(tmp_path: Path) -> None:
    """No requirement names it yet: launch-failed.json reads back with its stamps
    and whether the process had recorded its started row; status's launch_failed
    is {pid, reason, at, started}."""
    run = RunDir.of(tmp_path, "r1")
    run.root.mkdir(parents=True)
    record_failure(run, failure())
    back = read_failure(run)
    assert back == failure() and back is not None and back.files == FILES
    assert back.to_json() == {
        "pid": 41,
        "reason": REASON,
        "at": "2026-12-06T05:00:00Z",
        "started": False,
    }
    assert back.told() == REASON
    record_failure(run, failure(files=None))
    assert (back := read_failure(run)) is not None and back.files is None
    stopped = LaunchFailure(41, REASON, "2026-12-06T05:00:00Z", FILES, started=True)
    record_failure(run, stopped)
    assert (back := read_failure(run)) == stopped and back is not None and back.started
    assert back.told() == f"its process 41 stopped after its started row: {REASON}"


def test_stamps_see_a_chmod_but_not_a_lock_file_made_in_the_run_directory(
    tmp_path: Path,
) -> None:
    """No requirement names it yet: a file's stamp changes with its mode and ctime
    (what `chattr -i` and `chmod` change, not the mtime); the run directory's does
    not change when a file is made in it (each launch takes its locks there); the
    files are run.json, the workflow it names, roles.toml, the journal and the
    run directory."""
    state = tmp_path / "state"
    run = RunDir.of(state, "r1")
    run.root.mkdir(parents=True)
    run.run_json.write_text('{"workflow": {"path": "/w/fix.toml"}}')
    run.journal.write_bytes(b"")
    assert launch_files(run, state) == [
        run.run_json,
        Path("/w/fix.toml"),
        state / "roles.toml",
        run.journal,
        run.root,
    ]
    for spec in ("{}", '{"workflow": "w.toml"}', "not json"):  # run.json names none
        run.run_json.write_text(spec)
        assert launch_files(run, state) == [
            run.run_json,
            state / "roles.toml",
            run.journal,
            run.root,
        ]
    run.run_json.write_text('{"workflow": {"path": "/w/fix.toml"}}')
    before = stamps(run, state)
    assert before[str(state / "roles.toml")] == () and before["/w/fix.toml"] == ()
    (run.root / "process.x.lock").touch()
    assert stamps(run, state) == before
    ctime = os.stat(run.journal).st_ctime_ns
    while os.stat(run.journal).st_ctime_ns == ctime:  # a coarse clock: until it moves
        os.chmod(run.journal, 0o600)
    assert stamp(run.journal) != before[str(run.journal)]
