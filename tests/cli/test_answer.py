"""`crw flow answer RUN CALL --retry|--skip|--abort` on run directories built by
hand (spec: CMD-NEXT-27, and the decision row of docs/rows.md): its refusals, the
row it appends, its idempotence, its drain of a live process and its resume."""

from __future__ import annotations

import json
import shutil
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from crw.engine.run.locks import hold_run, is_held
from crw.engine.run.rundir import RunDir
from crw.journal.log import read_journal
from tests.cli.conftest import Crw, Result, wait_for_exit
from tests.cli.test_next import RUN, _append_rows, _make_run
from tests.deadlines import LOADED

CALL = "build.1"
HELD: list[dict[str, Any]] = [
    {"row": "completed", "call": "explore.1", "result": {"files": []}},
    {"row": "step_published", "call": CALL, "k": 1, "attempt": 1, "action": "spawn"},
    {"row": "thread_started", "call": CALL, "thread_id": "thr-a", "attempt": 1},
    {"row": "turn_started", "call": CALL, "k": 1, "attempt": 1, "turn_id": "turn-1"},
    {"row": "held", "call": CALL, "reason": "host_failure", "error": "boom"},
]


def _answer(crw: Crw, *args: str, call: str = CALL, run: str = RUN, timeout: float = 60) -> Result:
    state = str(crw.state)
    return crw("flow", "answer", run, call, *args, "--state", state, "--json", timeout=timeout)


def _held_run(crw: Crw) -> RunDir:
    run = _make_run(crw)
    _append_rows(run, {"row": "prepared", "call": "explore.1", "node": "explore"}, *HELD)
    return run


def _rows(run: RunDir) -> list[dict[str, Any]]:
    return read_journal(run.journal).rows


def _refused(result: Result, code: int, words: str) -> None:
    assert result.code == code, result
    line = result.error().strip()
    assert "\n" not in line and words in line, line


@pytest.mark.parametrize(
    ("args", "call", "code", "words"),
    [
        (("--retry",), "nope.1", 1, "run fix-20261129-000000-abcd has no call nope.1"),
        (("--retry",), "explore.1", 1, "call explore.1 of run fix-20261129-000000-abcd is "),
        ((), CALL, 2, "exactly one of --retry, --skip, --abort"),
        (("--retry", "--skip"), CALL, 2, "exactly one of --retry, --skip, --abort"),
    ],
)
def test_answer_refuses_with_one_line_and_appends_nothing(
    crw: Crw, args: tuple[str, ...], call: str, code: int, words: str
) -> None:
    """An unknown call, a call not held, and no one choice are refused; the journal
    stays as it was."""
    run = _held_run(crw)
    before = run.journal.read_bytes()
    _refused(_answer(crw, *args, "--no-resume", call=call), code, words)
    assert run.journal.read_bytes() == before


def test_answer_refuses_an_unknown_run(crw: Crw) -> None:
    _held_run(crw)
    _refused(_answer(crw, "--retry", run="no-such-run"), 2, 'run "no-such-run" not found')


def test_answer_refuses_a_run_not_waiting_decision(crw: Crw) -> None:
    """A paused run's held call is answered once the run goes on, not before."""
    run = _held_run(crw)
    _append_rows(run, {"row": "paused", "reason": "usage_limit_exceeded"})
    before = run.journal.read_bytes()
    _refused(_answer(crw, "--retry"), 1, "is paused, not waiting_decision")
    assert run.journal.read_bytes() == before


def test_answer_appends_the_decision_row_and_the_same_answer_again_appends_nothing(
    crw: Crw,
) -> None:
    """The decision row names the call, the choice and the held row's reason; the
    same answer twice says so, and another answer to the same hold is refused."""
    run = _held_run(crw)
    first = _answer(crw, "--retry", "--no-resume")
    assert first.code == 0, first.stderr
    rows = _rows(run)
    assert {k: rows[-1][k] for k in ("row", "call", "choice", "reason")} == {
        "row": "decision",
        "call": CALL,
        "choice": "retry",
        "reason": "host_failure",
    }
    assert first.json() | {"state": None} == {
        "run": RUN,
        "call": CALL,
        "choice": "retry",
        "recorded": True,
        "seq": rows[-1]["seq"],
        "resumed_pid": None,
        "resume_refused": None,
        "state": None,
    }
    assert not any(r["row"] == "started" for r in rows[-1:])  # --no-resume: no process
    before = run.journal.read_bytes()
    again = _answer(crw, "--retry", "--no-resume")
    assert again.code == 0 and again.json()["recorded"] is False
    _refused(_answer(crw, "--skip", "--no-resume"), 1, "was answered retry already")
    assert run.journal.read_bytes() == before


def test_status_shows_a_held_calls_reason_and_the_commands_that_answer_it(crw: Crw) -> None:
    _held_run(crw)
    status = crw("flow", "status", RUN, "--state", str(crw.state), "--json").json()
    (build,) = [call for call in status["calls"] if call["call"] == CALL]
    assert build["reason"] == "host_failure"
    assert build["answer"]["retry"] == f"crw flow answer {RUN} {CALL} --retry --state {crw.state}"
    assert build["answer"]["abort"] == f"crw flow answer {RUN} {CALL} --abort --state {crw.state}"


def test_answer_abort_ends_the_run(crw: Crw) -> None:
    run = _held_run(crw)
    result = _answer(crw, "--abort")
    assert result.code == 0, result.stderr
    assert result.json()["state"] == "ended" and result.json()["resumed_pid"] is None
    assert [r["row"] for r in _rows(run)][-1] == "decision"
    status = crw("flow", "status", RUN, "--state", str(crw.state), "--json").json()
    assert (status["state"], status["ended_status"]) == ("ended", "aborted")


def test_answer_waits_for_the_live_process_and_says_when_it_still_runs(crw: Crw) -> None:
    """spec: CMD-NEXT-27: while the run's process holds the run lock (it runs another
    call), the answer waits up to --wait and then says how many calls it still runs,
    appending nothing."""
    run = _held_run(crw)
    _append_rows(run, {"row": "prepared", "call": "other.1", "node": "other"})
    with hold_run(run):
        before = run.journal.read_bytes()
        result = _answer(crw, "--retry", "--wait", "0.5")
        assert run.journal.read_bytes() == before
    _refused(result, 1, "still runs 1 call; answer again once it has ended")


def test_answer_stores_its_row_after_the_drained_process_and_before_the_resume(
    crw: Crw,
) -> None:
    """spec: CMD-NEXT-27: the answer takes the run lock the moment the process it
    drains lets it go, stores its row under it, and the process it then starts
    (the resume) takes the lock after it: that process's started row follows the
    decision row."""
    run = _held_run(crw)
    held = threading.Event()
    released_at: list[int] = []

    def process() -> None:
        with hold_run(run):
            held.set()
            time.sleep(1.0)
            released_at.append(len(_rows(run)))

    holder = threading.Thread(target=process)
    holder.start()
    assert held.wait(5)
    result = _answer(crw, "--retry", "--wait", "10")
    holder.join()
    assert result.code == 0, result.stderr
    pid = result.json()["resumed_pid"]
    assert isinstance(pid, int)
    crw.pids.append(pid)  # reaped at teardown
    deadline = time.monotonic() + LOADED
    while not any(r.get("pid") == pid for r in _rows(run)):  # its started row
        assert time.monotonic() < deadline, (run.root / "run.log").read_text()
        time.sleep(0.05)
    wait_for_exit(run.root)  # the resumed process finds no host and pauses
    rows = _rows(run)
    assert released_at == [len(HELD) + 3]  # no row was stored while the process ran
    kinds = [r["row"] for r in rows[len(HELD) + 3 :]]
    assert kinds[:2] == ["decision", "started"]
    assert rows[len(HELD) + 4]["pid"] == pid


def test_answer_appends_its_row_while_it_holds_the_run_lock(
    crw: Crw, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """spec: CMD-NEXT-27: the decision row reaches the journal while the answer holds
    the run lock (seen by a probe of the lock at the moment of the append), and the
    lock is let go once the row is stored."""
    from crw.cli.run.answer import answer_command
    from crw.journal.log import JournalFile

    run = _held_run(crw)
    append = JournalFile.append
    held_at_append: list[bool] = []

    def spy(self: JournalFile, *args: Any, **kwargs: Any) -> Any:
        held_at_append.append(is_held(run.run_lock))
        return append(self, *args, **kwargs)

    monkeypatch.setattr(JournalFile, "append", spy)
    code = answer_command(
        RUN, CALL, choice="retry", resume=False, wait=0.0, state=str(crw.state), json=True
    )
    assert code == 0
    assert json.loads(capsys.readouterr().out)["recorded"] is True
    assert held_at_append == [True]
    assert _rows(run)[-1]["row"] == "decision"
    assert not is_held(run.run_lock)


def test_answer_refuses_run_env_unusable_before_anything(crw: Crw, tmp_path: Path) -> None:
    """A recorded TMPDIR that is gone refuses the answer that would resume: nothing
    appended, nothing drained, no process started; --no-resume is not asked."""
    run = _held_run(crw)
    shutil.rmtree(crw.env["TMPDIR"])
    before = run.journal.read_bytes()
    _refused(_answer(crw, "--retry"), 1, "run_env_unusable: run fix-20261129-000000-abcd")
    assert run.journal.read_bytes() == before
    assert _answer(crw, "--retry", "--no-resume").code == 0


OPEN: list[dict[str, Any]] = HELD[:-1]
"""build.1 bound and running: the process that ran it is gone or still runs it."""


def test_restart_of_an_open_call_is_refused_while_the_process_runs_it(crw: Crw) -> None:
    """spec: ATT-36: a live process runs the open call itself: the restart is
    refused at once (no drain), one line naming what to do, nothing appended; once
    no process holds the run it is recorded with the node's new call, and the
    same answer again appends nothing."""
    run = _make_run(crw)
    _append_rows(run, {"row": "prepared", "call": "explore.1", "node": "explore"}, *OPEN)
    before = run.journal.read_bytes()
    with hold_run(run):
        result = _answer(crw, "--restart", "--no-resume", "--wait", "30")
    _refused(result, 1, f"pause the run first (crw flow pause {RUN}), then answer")
    assert run.journal.read_bytes() == before
    first = _answer(crw, "--restart", "--no-resume")
    assert first.code == 0, first.stderr
    row = _rows(run)[-1]
    assert {k: row.get(k) for k in ("row", "call", "choice", "by")} == {
        "row": "decision",
        "call": CALL,
        "choice": "restart",
        "by": "build.2",
    }
    assert first.json()["by"] == "build.2" and first.json()["recorded"] is True
    after = run.journal.read_bytes()
    again = _answer(crw, "--restart", "--no-resume")
    assert again.code == 0 and again.json()["recorded"] is False
    assert again.json()["by"] == "build.2"
    assert run.journal.read_bytes() == after


def test_restart_of_a_held_call_names_its_new_call_in_status(crw: Crw) -> None:
    """spec: ATT-36: a held call answered restart leaves waiting_decision; status
    names the call that runs its node again; another answer to it is refused."""
    run = _held_run(crw)
    assert _answer(crw, "--restart", "--no-resume").code == 0
    assert _rows(run)[-1]["reason"] == "host_failure"
    status = crw("flow", "status", RUN, "--state", str(crw.state), "--json").json()
    (build,) = [call for call in status["calls"] if call["call"] == CALL]
    assert (build["state"], build["by"]) == ("restarting", "build.2")
    assert status["state"] != "waiting_decision"
    human = crw("flow", "status", RUN, "--state", str(crw.state)).stdout
    assert "restarted: node build runs again as build.2" in human
    _refused(_answer(crw, "--retry", "--no-resume"), 1, "was answered restart already")


def test_restart_is_refused_on_the_app_server_backend(crw: Crw) -> None:
    run = _held_run(crw)
    _append_rows(run, {"row": "started", "backend": "app-server", "pid": 2})
    _append_rows(run, {"row": "held", "call": CALL, "reason": "host_failure"})
    before = run.journal.read_bytes()
    _refused(_answer(crw, "--restart"), 1, "--restart restarts session calls only")
    assert run.journal.read_bytes() == before


def test_restart_takes_a_call_a_pause_held(crw: Crw) -> None:
    """spec: ATT-36: pause first, then restart: a paused run's call held by the
    pause is answered restart (a retry of it waits for the resume instead)."""
    run = _make_run(crw)
    _append_rows(
        run,
        {"row": "prepared", "call": "explore.1", "node": "explore"},
        *OPEN,
        {"row": "held", "call": CALL, "reason": "paused"},
        {"row": "paused", "reason": "paused"},
    )
    _refused(_answer(crw, "--retry", "--no-resume"), 1, "is paused, not waiting_decision")
    result = _answer(crw, "--restart", "--no-resume")
    assert result.code == 0, result.stderr
    row = _rows(run)[-1]
    assert (row["choice"], row["reason"], row["by"]) == ("restart", "paused", "build.2")
