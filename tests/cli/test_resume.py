"""`crw flow resume`: refusals before anything changes, and a paused run going on."""

from __future__ import annotations

import json
from pathlib import Path

from crw.engine.run.rundir import RunDir
from crw.host.sim.process import launch_sim, stop_sim
from crw.journal.log import read_journal
from tests.cli.conftest import EXAMPLES, Crw, wait_for_exit, waiting_for_no_host

WORKFLOW = str(EXAMPLES / "fix-issue.toml")


def test_paused_run_resumes_in_the_foreground_and_ends(crw: Crw, tmp_path: Path) -> None:
    sim_socket = tmp_path / "h.sock"
    no_wait = str(waiting_for_no_host(tmp_path))  # no wait to race the resume by hand
    out = crw.start(no_wait, "--backend", "app-server", "--host", f"unix:{sim_socket}").json()
    run = RunDir(Path(out["run_dir"]))
    wait_for_exit(run.root)
    rows = read_journal(run.journal).rows
    assert [r["row"] for r in rows] == ["started", "paused"]
    assert rows[1]["reason"] == "host_unavailable"
    host = launch_sim(sim_socket, tmp_path / "sim-home")
    try:
        result = crw("flow", "resume", out["run"], "--state", str(crw.state), "--json")
    finally:
        stop_sim(host)
    assert result.code == 0, result.stderr
    assert result.json()["state"] == "ended" and result.json()["ended_status"] == "completed"
    rows = read_journal(run.journal).rows
    assert [r["row"] for r in rows if r["row"] == "started"] == ["started", "started"]
    assert rows[-1]["row"] == "ended"


def test_resume_of_an_ended_run_is_refused(crw: Crw) -> None:
    out = crw("flow", "demo", "--state", str(crw.state), "--json").json()
    before = RunDir(Path(out["run_dir"])).journal.read_bytes()
    result = crw("flow", "resume", out["run"], "--state", str(crw.state))
    assert result.code == 1 and "ended" in result.stderr
    assert RunDir(Path(out["run_dir"])).journal.read_bytes() == before


def test_mixed_resume_is_an_input_error_before_any_row(crw: Crw) -> None:
    """spec: GEN-12"""
    out = crw.start(WORKFLOW, "--owner", "o").json()
    run = RunDir(Path(out["run_dir"]))
    wait_for_exit(run.root)
    spec = json.loads(run.run_json.read_text())
    run.run_json.write_text(json.dumps(spec | {"backend": "app-server"}))
    before = run.journal.read_bytes()
    result = crw("flow", "resume", out["run"], "--state", str(crw.state))
    assert result.code == 2 and "mixed resume" in result.stderr
    assert run.journal.read_bytes() == before


def test_resume_of_a_run_a_process_holds_is_refused(crw: Crw) -> None:
    from crw.engine.run.locks import run_lock

    out = crw.start(WORKFLOW, "--owner", "o").json()
    run = RunDir(Path(out["run_dir"]))
    wait_for_exit(run.root)
    with run_lock(run):
        result = crw("flow", "resume", out["run"], "--state", str(crw.state), "--detach")
    assert result.code == 1 and "held by a live process" in result.stderr
