"""`crw flow show`: a run's history, one line a row, on a finished, a running and a
crashed run of real processes (a `crw host sim serve` host, the session run's
process, the drill's owner), and on a corrupt journal.

Every process is reaped at teardown by pid (the drill's `reap`, `Followers`).
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from crw.cli.output import one_line
from crw.engine.run.rundir import RunDir
from crw.engine.views.row_lines import row_line
from crw.text import replace_surrogates
from tests.cli.conftest import EXAMPLES, REPO, Crw, Result, wait_for_exit
from tests.cli.test_status import _journal_line
from tests.deadlines import LOADED
from tests.drill.test_crash_drill import CALL, Drill, kill, wait_until

pytest_plugins = ["tests.drill.test_crash_drill"]  # its `drill`: a run on its own sim host

HANG = {"match": {"marker": f"{CALL}/*"}, "behaviour": {"hang": True}}
FOLLOW_END = LOADED
"""Seconds a follower may take to exit once its run ended (a loaded machine's)."""


def line(row: dict[str, Any]) -> str:
    return one_line(replace_surrogates(row_line(row)))


class Followers:
    """`crw` commands left running, their output in files; killed at teardown."""

    def __init__(self, root: Path, crw: Crw) -> None:
        self.root, self.crw = root, crw
        self.children: list[subprocess.Popen[bytes]] = []

    def start(self, name: str, *args: str) -> subprocess.Popen[bytes]:
        with (
            (self.root / f"{name}.out").open("wb") as out,
            (self.root / f"{name}.err").open("wb") as err,
        ):
            child = subprocess.Popen(
                [sys.executable, "-m", "crw", *args, "--state", str(self.crw.state)],
                stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=self.crw.env, cwd=REPO,
            )  # fmt: skip
        self.children.append(child)
        return child

    def output(self, name: str) -> str:
        return (self.root / f"{name}.out").read_text()

    def ended(self, name: str, child: subprocess.Popen[bytes]) -> Result:
        try:
            code = child.wait(timeout=FOLLOW_END)
        except subprocess.TimeoutExpired:
            status = Path(f"/proc/{child.pid}/status").read_text().splitlines()
            signals = [line for line in status if line.startswith(("SigBlk", "SigIgn", "SigCgt"))]
            stack = Path(f"/proc/{child.pid}/wchan").read_text()
            raise AssertionError(f"{name} did not exit: {signals}, wchan {stack}") from None
        return Result(code, self.output(name), (self.root / f"{name}.err").read_text())

    def reap(self) -> None:
        for child in self.children:
            kill(child.pid)
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(timeout=5)


@pytest.fixture
def followers(drill: Drill) -> Iterator[Followers]:
    made = Followers(drill.root, drill.crw)
    try:
        yield made
    finally:
        made.reap()


def raw(crw: Crw, *args: str) -> Result:
    """`crw ARGS`, its output as it is (`Crw` reads a pid out of a JSON answer)."""
    done = subprocess.run(
        [sys.executable, "-m", "crw", *args], env=crw.env, stdin=subprocess.DEVNULL,
        capture_output=True, text=True, timeout=60, cwd=crw.state.parent,
    )  # fmt: skip
    return Result(done.returncode, done.stdout, done.stderr)


def show(drill: Drill, *args: str) -> Result:
    assert drill.run is not None
    return raw(drill.crw, "flow", "show", drill.run.id, *args, "--state", str(drill.crw.state))


def watching(pid: int) -> bool:
    """Whether process `pid` has an inotify watch (it sleeps on one, not a poll)."""
    for info in Path(f"/proc/{pid}/fdinfo").iterdir():
        with contextlib.suppress(OSError):
            if "inotify wd:" in info.read_text():
                return True
    return False


def hanging(drill: Drill) -> list[dict[str, Any]]:
    """A running run: build's subagent works until it is interrupted."""
    drill.host("sim/script", HANG)
    drill.start(crash_after=None)
    wait_until("build's turn runs", lambda: any(
        r["row"] == "turn_started" and r.get("call") == CALL for r in drill.rows()
    ))  # fmt: skip
    return drill.rows()


def crashed(drill: Drill) -> list[dict[str, Any]]:
    """A crashed run: its process killed right after build's turn started, and its
    owner gone, so that nothing resumes it."""
    drill.start(crash_after=f"turn_started@{CALL}")
    lock = drill.take_run_lock_once_released()
    try:
        drill.pause_owner()
        assert drill.owner is not None
        kill(drill.owner.pid)
        drill.owner.wait(timeout=5)
    finally:
        drill.let_run_lock_go(lock)
    return drill.rows()


def test_show_of_a_finished_run_prints_each_row_as_its_line(drill: Drill) -> None:
    drill.start(crash_after=None)
    rows = drill.finish()
    assert drill.run is not None
    result = show(drill)
    assert result.code == 0, result.stderr
    head, *lines = result.stdout.splitlines()
    assert head == f"run {drill.run.id}: its rows from {rows[0]['at'][:10]} (times in UTC)"
    assert lines == [line(row) for row in rows]
    assert lines[-1].split()[3:5] == ["ended", "completed,"]
    kinds = [text.split()[3] for text in lines if text.split()[2] == CALL]
    assert kinds == [
        "prepared", "step_published", "thread_started", "turn_started",
        "step_published", "turn_started", "completed",
    ]  # fmt: skip

    only = show(drill, "--call", CALL)
    assert only.stdout.splitlines()[1:] == [line(r) for r in rows if r.get("call") == CALL]

    as_json = show(drill, "--json")
    assert as_json.code == 0
    assert [json.loads(text) for text in as_json.stdout.splitlines()] == rows

    followed = show(drill, "--follow")
    assert (followed.code, followed.stdout) == (0, result.stdout)
    assert_an_unknown_call_is_an_input_error(drill)


def assert_an_unknown_call_is_an_input_error(drill: Drill) -> None:
    """`show --call` of a call the finished run does not have (asked of the run the
    test above ran to its end: a run of its own would be one more whole run)."""
    assert drill.run is not None
    result = show(drill, "--call", "nope.1")
    assert result.code == 2 and result.stdout == ""
    assert result.stderr == (
        f'crw: error: run {drill.run.id} has no call "nope.1" (its calls: explore.1, '
        f"build.1, review.1); name one as crw flow status {drill.run.id} --state "
        f"{drill.crw.state} lists them\n"
    )


def test_show_follow_of_a_running_run_prints_the_new_rows_until_the_run_ends(
    drill: Drill, followers: Followers
) -> None:
    """It sleeps on an inotify watch of the run's directory, and prints the rows
    the run commits after it started, up to the ended row; then exits 0."""
    rows = hanging(drill)
    assert drill.run is not None
    now = show(drill)
    assert now.code == 0 and now.stdout.splitlines()[1 : len(rows) + 1] == list(map(line, rows))

    child = followers.start("follow", "flow", "show", drill.run.id, "--follow")
    build = followers.start("build", "flow", "show", drill.run.id, "--follow", "--call", CALL)
    stopped = followers.start("stopped", "flow", "show", drill.run.id, "--follow")
    turn = line(rows[-1])
    wait_until("the follower printed the rows so far", lambda: turn in followers.output("follow"))
    wait_until("the call's follower did", lambda: turn in followers.output("build"))
    wait_until("the follower sleeps on an inotify watch", lambda: watching(child.pid))
    assert child.poll() is None  # the run goes on: so does the follower
    wait_until("the last follower sleeps too", lambda: watching(stopped.pid))
    stopped.send_signal(signal.SIGINT)  # Ctrl-C: quietly, no traceback
    interrupted = followers.ended("stopped", stopped)
    assert (interrupted.code, interrupted.stderr) == (130, "")

    cancelled = drill.crw("flow", "cancel", drill.run.id, "--state", str(drill.crw.state))
    assert cancelled.code == 0, cancelled.stderr
    followed = followers.ended("follow", child)
    assert followed.code == 0, followed.stderr
    every = drill.rows()
    assert followed.stdout.splitlines()[1:] == list(map(line, every))
    assert [r["row"] for r in every[len(rows) :]][-2:] == ["cancelled", "ended"]
    of_build = followers.ended("build", build)
    assert of_build.code == 0
    assert of_build.stdout.splitlines()[1:] == [line(r) for r in every if r.get("call") == CALL]
    assert of_build.stdout.splitlines()[-1].split()[3] == "held"


def test_show_of_a_crashed_run_prints_its_rows_and_follow_says_no_process_runs_it(
    drill: Drill,
) -> None:
    rows = crashed(drill)
    assert drill.run is not None
    assert rows[-1]["row"] == "turn_started" and rows[-1]["call"] == CALL
    result = show(drill)
    assert result.code == 0 and result.stdout.splitlines()[1:] == list(map(line, rows))

    followed = show(drill, "--follow")
    assert followed.code == 1
    assert followed.stdout == result.stdout
    assert followed.stderr == (
        f"crw: no process runs run {drill.run.id} (its rows leave it running), so its "
        f"journal grows no more; see what to do with: crw flow status {drill.run.id} "
        f"--state {drill.crw.state}\n"
    )


def test_show_of_a_corrupt_journal_prints_the_rows_before_the_damage_and_where_it_is(
    crw: Crw,
) -> None:
    out = crw.start(str(EXAMPLES / "fix-issue.toml"), "--owner", "o").json()
    run = RunDir(Path(out["run_dir"]))
    wait_for_exit(run.root)  # its host is not there: started, then paused
    with open(run.journal, "a") as journal:
        journal.write(_journal_line(3, "prepared", call="explore.1", node="explore"))
        damaged_at = journal.tell()
        journal.write(
            _journal_line(4, "completed", call="explore.1").replace("completed", "c0mpleted")
        )
        journal.write(_journal_line(5, "prepared", call="build.1", node="build"))
    before = run.journal.read_bytes()
    args = ("flow", "show", out["run"], "--state", str(crw.state))
    result = crw(*args)
    assert result.code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert [text.split()[3] for text in lines[1:4]] == ["started", "paused", "prepared"]
    assert lines[4].startswith(f"journal {run.journal} is damaged at byte {damaged_at} (")
    assert lines[4].endswith("; the rows after it are not shown")
    assert lines[5].startswith("the file is kept as it is") and len(lines) == 6

    as_json = [json.loads(text) for text in raw(crw, *args, "--json").stdout.splitlines()]
    assert [row.get("row") for row in as_json] == ["started", "paused", "prepared", None]
    assert as_json[-1]["corrupt"]["offset"] == damaged_at
    assert as_json[-1]["corrupt"]["journal"] == str(run.journal)

    followed = crw(*args, "--follow")
    assert followed.code == 1 and followed.stdout == result.stdout
    assert run.journal.read_bytes() == before


def test_show_of_a_torn_journal_drops_the_torn_batch_and_warns_once(crw: Crw) -> None:
    out = crw.start(str(EXAMPLES / "fix-issue.toml"), "--owner", "o").json()
    run = RunDir(Path(out["run_dir"]))
    wait_for_exit(run.root)
    whole = run.journal.read_text().splitlines()
    with open(run.journal, "a") as journal:
        journal.write(_journal_line(3, "prepared", call="a.1")[:-9])
    result = crw("flow", "show", out["run"], "--state", str(crw.state))
    assert result.code == 0
    assert len(result.stdout.splitlines()) == 1 + len(whole)
    assert result.stderr.count("crw: warning:") == 1
    assert "torn" in result.stderr and str(run.journal) in result.stderr
