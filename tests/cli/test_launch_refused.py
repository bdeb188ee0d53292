"""A launch that did not give the run a process, said as it is: `answer` and
`resume --detach` wait for the started row of the process they launched and
report one that stopped before it (its workflow changed since the run started)
with its line, exit 1; `status` and `next` show the reason while no process holds
the run, and `next` hands out no step of a dead process. Run directories built
by hand (`tests.cli.test_next`), real `crw` processes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from crw.engine.config.workflow import load_workflow
from crw.engine.run.rundir import RunDir
from crw.journal.log import read_journal
from tests.cli.conftest import EXAMPLES, Crw, Result, wait_for_exit
from tests.cli.test_answer import _answer, _held_run
from tests.cli.test_next import RUN, _make_run, _step

CHANGED = "changed since the run started; restore the file the run started with"


def _rows(run: RunDir) -> list[dict[str, Any]]:
    return read_journal(run.journal).rows


def _kinds(run: RunDir) -> list[str]:
    return [row["row"] for row in _rows(run)]


def _own_workflow(run: RunDir, tmp_path: Path) -> Path:
    """Point the run's spec at a copy of its workflow (and the schemas it names),
    so the test can edit the file the run started with."""
    copy = tmp_path / "workflows"
    shutil.copytree(EXAMPLES, copy)
    workflow = copy / "fix-issue.toml"
    spec = json.loads(run.run_json.read_text())
    spec["workflow"] = {"path": str(workflow), "digest": load_workflow(workflow).digest}
    run.run_json.write_text(json.dumps(spec))
    return workflow


def _edit(workflow: Path) -> None:
    """An edit that changes no node: a comment."""
    workflow.write_text(workflow.read_text() + "# an edit\n")


def _one_line(result: Result, code: int, *words: str) -> str:
    assert result.code == code, result
    line = result.error().strip()
    assert "\n" not in line, line
    for word in words:
        assert word in line, line
    return line


def _status(crw: Crw) -> dict[str, Any]:
    result = crw("flow", "status", RUN, "--state", str(crw.state), "--json")
    assert result.code == 0, result.stderr
    return result.json()


def _next(crw: Crw) -> Result:
    return crw("flow", "next", RUN, "--state", str(crw.state), "--json")


def _resume(crw: Crw) -> Result:
    return crw("flow", "resume", RUN, "--detach", "--state", str(crw.state), "--json")


def _shows_the_reason(crw: Crw, run: RunDir, *words: str) -> None:
    """status names the failed launch and the resume to run once it is fixed;
    next keeps the run's state, hands out none of the dead process's steps and
    names the reason in its hint and warnings, and launches nothing while the
    files the launch stopped on are unchanged."""
    status = _status(crw)
    assert status["live"] is False
    failed = status["launch_failed"]
    assert failed is not None and isinstance(failed["pid"], int)
    assert all(word in failed["reason"] for word in words), failed
    resume = f"crw flow resume {RUN} --detach --state {crw.state}"
    assert status["todo"][0]["command"] == resume
    assert failed["reason"] in status["todo"][0]["do"]
    nexted = _next(crw)
    assert nexted.code == 0, nexted.stderr
    view = nexted.json()
    assert view["state"] in ("running", "waiting_session")
    assert view["steps"] == [] and "resumed_pid" not in view
    assert "none could start" in view["hint"] and "Make each step" not in view["hint"]
    assert resume in view["hint"]
    assert all(word in view["hint"] for word in words), view["hint"]
    assert any("none could start" in warning for warning in view["warnings"])
    # the files the launch stopped on are as they were: next launches nothing
    assert "next starts no process for it until" in view["hint"]
    assert "its resume did not start" not in nexted.stderr
    assert _status(crw)["launch_failed"] == failed
    assert (run.steps / "build.1" / "t1-a2.json").exists()  # next removes no step file


def test_an_answer_whose_process_refuses_a_changed_workflow_exits_1_with_its_line(
    crw: Crw, tmp_path: Path
) -> None:
    """No requirement names it yet (the spec's "Every detached launch ..." line
    says what a launch refuses before it starts, not after): the workflow edited
    (a comment) while the run waits on a decision: `answer --retry` records its
    decision, launches the run's process, sees it stop before its started row and
    exits 1 with the process's line; no started row is written, and status and
    next say why while no process holds the run."""
    run = _held_run(crw)
    _edit(_own_workflow(run, tmp_path))
    _step(run, "build.1", 1, 2)  # a step a dead process left
    started = _kinds(run).count("started")
    answered = _answer(crw, "--retry")
    _one_line(answered, 1, f"call build.1 of run {RUN}: answered retry", "was not resumed", CHANGED)
    assert _kinds(run)[-1] == "decision" and _kinds(run).count("started") == started
    _shows_the_reason(crw, run, CHANGED)
    assert _kinds(run).count("started") == started


def test_a_detached_resume_whose_process_refuses_reports_it_until_a_process_starts(
    crw: Crw, tmp_path: Path
) -> None:
    """No requirement names it yet: `resume --detach` after a workflow edit exits 1
    with the process's line and writes no row; status and next show it; once the
    file is restored the resume starts a process (exit 0), whose started row
    clears what status showed."""
    run = _make_run(crw)
    workflow = _own_workflow(run, tmp_path)
    original = workflow.read_bytes()
    _edit(workflow)
    _step(run, "build.1", 1, 2)
    before = run.journal.read_bytes()
    line = _one_line(_resume(crw), 1, f"run {RUN} was not resumed", CHANGED)
    assert f"then resume it with: crw flow resume {RUN} --detach" in line
    assert run.journal.read_bytes() == before
    _shows_the_reason(crw, run, CHANGED)
    workflow.write_bytes(original)
    resumed = _resume(crw)
    assert resumed.code == 0, resumed.stderr
    assert resumed.json()["started"] is True
    wait_for_exit(run.root)  # it finds no host and pauses
    assert [row.get("pid") for row in _rows(run) if row["row"] == "started"][-1] == (
        resumed.json()["pid"]
    )
    assert _status(crw)["launch_failed"] is None


def _no_tmpdir(crw: Crw, run: RunDir) -> str:
    Path(crw.env["TMPDIR"]).rmdir()
    return "make that directory again"


def _mixed(crw: Crw, run: RunDir) -> str:
    spec = json.loads(run.run_json.read_text())
    run.run_json.write_text(json.dumps(spec | {"backend": "app-server"}))
    return "restore run.json's backend to session"


@pytest.mark.parametrize("breaks", [_no_tmpdir, _mixed], ids=["tmpdir-gone", "mixed-resume"])
def test_next_after_a_refused_resume_hands_out_no_step_and_names_the_fix(
    crw: Crw, breaks: Any
) -> None:
    """spec: ENV-10, CMD-RESUME-4, CMD-NEXT-1: no process holds the run and none
    can start (its recorded TMPDIR gone; a mixed resume): next keeps the run's
    state, resumes nothing, hands out none of the dead process's steps and its
    hint names the fix and the resume to run then; it still warns "its resume did
    not start"."""
    run = _make_run(crw)
    _step(run, "build.1", 1, 2)
    fix = breaks(crw, run)
    before = run.journal.read_bytes()
    nexted = _next(crw)
    assert nexted.code == 0, nexted.stderr
    view = nexted.json()
    assert view["state"] == "running" and view["steps"] == [] and "resumed_pid" not in view
    assert "none could start" in view["hint"] and fix in view["hint"]
    assert f"crw flow resume {RUN} --detach --state {crw.state}" in view["hint"]
    assert "Make each step" not in view["hint"] and "wait_agent" not in view["hint"]
    assert any(fix in warning for warning in view["warnings"])
    assert "its resume did not start" in nexted.stderr
    human = crw("flow", "next", RUN, "--state", str(crw.state))
    assert human.code == 0 and "  no step" in human.stdout and "none could start" in human.stdout
    assert run.journal.read_bytes() == before
    assert (run.steps / "build.1" / "t1-a2.json").exists()


def _changed(crw: Crw, run: RunDir, tmp_path: Path) -> str:
    _edit(_own_workflow(run, tmp_path))
    return CHANGED


def _gone(crw: Crw, run: RunDir, tmp_path: Path) -> str:
    _no_tmpdir(crw, run)
    return "of its run.json does not exist; make that directory again"


@pytest.mark.parametrize("breaks", [_gone, _changed], ids=["tmpdir-gone", "workflow-changed"])
def test_answer_no_resume_names_what_a_resume_is_refused_for(
    crw: Crw, tmp_path: Path, breaks: Any
) -> None:
    """spec: ENV-11 (nothing refused, nothing started; the TMPDIR is read only to
    say so), ENV-12: --no-resume records the answer and starts nothing;
    while a resume would be refused (the recorded TMPDIR gone, the workflow
    changed) it names why and the fix rather than a resume that is refused, and
    does not call a run no process holds running."""
    run = _held_run(crw)
    words = breaks(crw, run, tmp_path)
    argv = ["flow", "answer", RUN, "build.1", "--retry", "--no-resume", "--state", str(crw.state)]
    answered = crw(*argv)
    assert answered.code == 0, answered.stderr
    said = answered.stdout.strip()
    assert "a resume is refused now: " in said and words in said, said
    assert said.endswith(
        f"then go on with: crw flow resume {RUN} --detach (no process holds the run)"
    )
    assert "(run running)" not in said
    assert _kinds(run)[-2:] == ["held", "decision"] and _kinds(run).count("started") == 1
    as_json = crw(*argv[:-2], "--state", str(crw.state), "--json")  # the same answer again
    assert as_json.code == 0 and as_json.json()["recorded"] is False
