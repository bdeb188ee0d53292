"""Real processes: a run paused host_unavailable goes on by itself when its host answers.

An app-server run on a `crw host sim serve` host has its host SIGSTOPped while
build.1's turn runs; the run pauses host_unavailable, and its process stays to
wait for the host (`status` says so, with its pid). The host is sent SIGCONT and
the run must go on and complete with no `crw flow resume`: the rows after the
paused row are those of a resume (its started row), then build.1's in place, then
ended. A run whose host is nowhere waits too, and a cancel or pause meanwhile
leaves no waiting process behind and nothing written by it. Every process is
reaped by pid at teardown (the drill's `reap`, the `Crw` runner's).
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from crw.engine.run.host_wait import waiting
from crw.engine.run.rundir import RunDir
from crw.journal.log import read_journal
from tests.cli.conftest import EXAMPLES, Crw
from tests.drill.test_app_server_crash_drill import AppDrill
from tests.drill.test_crash_drill import CALL, WORKFLOW, alive, wait_until
from tests.drill.test_host_down_drill import SLOW_BUILD, reap_stopped, turn_started

TIMEOUT = 2.0
"""The workflow's host_timeout (s): the probe's interval grows to it."""
SETTINGS = f"\n[settings]\nhost_timeout = {TIMEOUT}\nhost_wait = 120\n"


@pytest.fixture
def app_drill(tmp_path: Path) -> Iterator[AppDrill]:
    (tmp_path / "tmp").mkdir()
    made = AppDrill(tmp_path, Crw(tmp_path / "state", tmp_path / "tmp"))
    made.workflow.write_text(WORKFLOW + SETTINGS)
    try:
        made.serve()
        yield made
    finally:
        reap_stopped(made)


def flow(crw: Crw, *args: str) -> Any:
    out = crw("flow", *args, "--state", str(crw.state))
    assert out.code == 0, out.stderr
    return out.json() if "--json" in args else out.stdout


def test_an_app_server_run_whose_host_was_stopped_goes_on_by_itself_when_it_answers(
    app_drill: AppDrill,
) -> None:
    """spec: ATT-6 (a host that stopped answering pauses the run host_unavailable;
    the run goes on in place when it answers again, with no resume typed)"""
    app_drill.host("sim/script", SLOW_BUILD)
    app_drill.start(crash_after=None)
    run = app_drill.run
    assert run is not None
    wait_until(f"{CALL}'s turn starts", lambda: turn_started(app_drill))
    host = app_drill.processes[0].pid
    os.kill(host, signal.SIGSTOP)
    wait_until("the run pauses", lambda: app_drill.rows()[-1]["row"] == "paused")
    paused = app_drill.rows()
    assert paused[-1]["reason"] == "host_unavailable"
    assert [r["row"] for r in paused if r.get("call") == CALL][-1] == "turn_started"
    first = next(r for r in paused if r["row"] == "started")["pid"]
    wait_until("its process waits for the host", lambda: waiting(run) is not None)
    status = flow(app_drill.crw, "status", run.id, "--json")
    assert status["state"] == "paused" and not status["live"]
    assert status["host_wait"]["pid"] == first and alive(first)
    assert "goes on by itself" in status["todo"][0]["do"]
    assert status["todo"][0]["command"].startswith(f"crw flow resume {run.id} --detach")
    human = flow(app_drill.crw, "status", run.id)
    assert f"waits for its host: process {first} until" in human
    told = flow(app_drill.crw, "next", run.id, "--json")
    assert told["state"] == "paused" and f"its process {first} waits for the host" in told["hint"]

    os.kill(host, signal.SIGCONT)
    rows = app_drill.finish()
    assert rows[-1]["row"] == "ended" and rows[-1]["status"] == "completed"
    # paused; what a resume writes (its started row); build.1 in place; the rest; ended
    assert [(r["row"], r.get("call")) for r in rows[len(paused) - 1 :]] == [
        ("paused", None),
        ("started", None),
        ("completed", CALL),
        ("prepared", "review.1"),
        ("step_published", "review.1"),
        ("thread_started", "review.1"),
        ("turn_started", "review.1"),
        ("completed", "review.1"),
        ("ended", None),
    ]
    assert "held" not in {r["row"] for r in rows}
    second = rows[len(paused)]["pid"]
    assert second != first
    wait_until("the waiting process is gone", lambda: not alive(first))
    assert f"its host answers again; resumed in process {second}" in run.log.read_text()


def _paused_nowhere(crw: Crw, tmp_path: Path, host_wait: int = 600) -> tuple[RunDir, int]:
    """A run on a host that is nowhere, paused host_unavailable; its waiting pid."""
    workflow = tmp_path / "wf.toml"
    text = (EXAMPLES / "fix-issue.toml").read_text().replace("schemas/", f"{EXAMPLES}/schemas/")
    workflow.write_text(text + f"\n[settings]\nhost_wait = {host_wait}\n")
    host = f"unix:{tmp_path / 'nowhere.sock'}"
    out = crw.start(str(workflow), "--backend", "app-server", "--host", host)
    assert out.code == 0, out.stderr
    run = RunDir(Path(out.json()["run_dir"]))
    wait_until("its process waits for the host", lambda: waiting(run) is not None)
    assert [r["row"] for r in read_journal(run.journal).rows] == ["started", "paused"]
    pid = out.json()["pid"]
    assert waiting(run) is not None and waiting(run).pid == pid  # type: ignore[union-attr]
    return run, pid


@pytest.fixture
def crw(tmp_path: Path) -> Iterator[Crw]:
    (tmp_path / "tmp").mkdir()
    runner = Crw(tmp_path / "state", tmp_path / "tmp")
    yield runner
    runner.reap()


def test_a_cancel_while_the_run_waits_for_its_host_leaves_no_process_behind(
    crw: Crw, tmp_path: Path
) -> None:
    """The waiter is told to stop; it writes nothing: the cancel's rows end the journal."""
    run, pid = _paused_nowhere(crw, tmp_path)
    flow(crw, "cancel", run.id, "--json")
    wait_until("the waiting process is gone", lambda: not alive(pid))
    rows = read_journal(run.journal).rows
    assert rows[-1]["row"] == "ended" and rows[-1]["status"] == "cancelled"
    assert [r["row"] for r in rows][:2] == ["started", "paused"]
    assert "started" not in [r["row"] for r in rows[2:]]
    assert flow(crw, "status", run.id, "--json")["host_wait"] is None


def test_a_pause_while_the_run_waits_stops_the_wait_and_writes_nothing(
    crw: Crw, tmp_path: Path
) -> None:
    """A pause by hand: the run stays paused and goes on only by `resume`."""
    run, pid = _paused_nowhere(crw, tmp_path)
    before = run.journal.read_bytes()
    flow(crw, "pause", run.id, "--json")
    wait_until("the waiting process is gone", lambda: not alive(pid))
    assert run.journal.read_bytes() == before
    status = flow(crw, "status", run.id, "--json")
    assert status["state"] == "paused" and status["host_wait"] is None


def test_rm_of_a_run_that_waits_for_its_host_leaves_no_process_behind(
    crw: Crw, tmp_path: Path
) -> None:
    run, pid = _paused_nowhere(crw, tmp_path)
    flow(crw, "rm", run.id, "--json")
    wait_until("the waiting process is gone", lambda: not alive(pid))
    assert not run.root.exists()


def test_a_resume_while_the_run_waits_is_the_one_that_goes_on_and_the_waiter_stops(
    crw: Crw, tmp_path: Path
) -> None:
    """A resume by hand while the host is still away: its process pauses the run
    again and waits in turn; the first waiter sees the journal move on and stops,
    writing nothing: one waiter at a time."""
    run, first = _paused_nowhere(crw, tmp_path)
    second = flow(crw, "resume", run.id, "--detach", "--json")["pid"]
    wait_until("the first waiter is gone", lambda: not alive(first))
    wait_until("the resumed process waits", lambda: getattr(waiting(run), "pid", 0) == second)
    rows = read_journal(run.journal).rows
    assert [r["row"] for r in rows] == ["started", "paused", "started", "paused"]
    assert [r["pid"] for r in rows if r["row"] == "started"] == [first, second]


def test_a_wait_that_runs_out_leaves_the_run_paused_and_its_log_says_so(
    crw: Crw, tmp_path: Path
) -> None:
    """host_wait bounds the wait: the process exits, the run stays paused for a resume."""
    run, pid = _paused_nowhere(crw, tmp_path, host_wait=4)
    before = run.journal.read_bytes()
    wait_until("the waiting process is gone", lambda: not alive(pid))
    assert run.journal.read_bytes() == before and waiting(run) is None
    log = run.log.read_text()
    assert "its host did not answer within host_wait (4 s); the run stays paused" in log
    assert f"crw flow resume {run.id}" in log.splitlines()[-1]
