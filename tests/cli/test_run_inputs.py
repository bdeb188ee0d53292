"""Run inputs and `crw flow validate` as a user meets them: real `crw` processes,
the simulated host, the run's process killed and resumed.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
from pathlib import Path

import trio

from crw.engine.run.locks import is_held
from crw.engine.run.rundir import RunDir
from tests.cli.conftest import Crw, wait_for_exit
from tests.cli.test_resume_env import _pid, _rows, _wait
from tests.cli.test_resume_env import sim as sim
from tests.drill.test_crash_drill import _host
from tests.workspace.gitrepo import make_repo

WORKFLOW = """\
name = "with-inputs"
pool = 1

[inputs.issue]
type = "file"
description = "the issue to fix"

[inputs.attempts]
type = "int"
default = 2

[inputs.strict]
type = "bool"

[[node]]
id = "explore"
role = "explorer"
task = "Issue: {inputs.issue} / attempts {inputs.attempts} / strict {inputs.strict}"
schema = { type = "object" }

[[node]]
id = "build"
role = "executor"
needs = ["explore"]
task = "Build from {explore.files}."
schema = { type = "object", required = ["done"], properties = { done = { type = "boolean" } } }
review = { role = "reviewer", rounds = 2 }
"""
STEP_DIR = Path("explore.1")
TASK = "Issue: the parser drops braces {x}\n / attempts 2 / strict true"


def _files(tmp_path: Path) -> tuple[Path, Path]:
    workflow = tmp_path / "w.toml"
    workflow.write_text(WORKFLOW)
    issue = tmp_path / "issue.md"
    issue.write_text("the parser drops braces {x}\n")
    return workflow, issue


def _packet(run: RunDir) -> str:
    """The packet of the step the run's process published for explore.1."""

    def steps() -> list[Path]:
        return list((run.steps / STEP_DIR).glob("t*.json"))

    _wait("the step published", steps)
    step = json.loads(steps()[0].read_text())
    return Path(step["packet"]).read_text()


def test_inputs_render_into_the_task_are_recorded_and_a_resume_reads_them_from_the_run(
    crw: Crw, sim: Path, tmp_path: Path
) -> None:
    """A session run: --input and --input-file fill the task; run.json and every
    started row record the values (the file by path and digest); status shows them;
    a resume after a kill renders the same task text though the file changed."""
    workflow, issue = _files(tmp_path)
    digest = "sha256:" + hashlib.sha256(issue.read_bytes()).hexdigest()
    owner = str(trio.run(_host, sim, "sim/startOwner", {})["threadId"])
    out = crw.start(
        str(workflow),
        "--owner",
        owner,
        "--host",
        f"unix:{sim}",
        "--input-file",
        f"issue={issue.name}",
        "--input",
        "strict=true",
    )
    assert out.code == 0, out.stderr
    run = RunDir(Path(out.json()["run_dir"]))
    recorded = {
        "issue": {"path": str(issue.resolve()), "digest": digest},
        "attempts": 2,
        "strict": True,
    }
    assert json.loads(run.run_json.read_text())["inputs"] == recorded
    assert out.json()["inputs"] == recorded  # the start says what it recorded
    assert TASK in _packet(run)
    status = crw("flow", "status", run.id, "--state", str(crw.state), "--json")
    assert status.json()["inputs"] == recorded
    text = crw("flow", "status", run.id, "--state", str(crw.state)).stdout
    assert "  inputs:\n" in text and "    attempts = 2\n" in text and "    strict = true\n" in text
    assert f"    issue = file {issue} ({digest[:19]})" in text
    # Killed, its file changed: the resume renders the task from the run's copy.
    os.kill(out.json()["pid"], signal.SIGKILL)
    _wait("the run lock let go", lambda: not is_held(run.run_lock))
    for path in (run.steps / STEP_DIR).iterdir():
        path.unlink()
    issue.write_text("something else\n")
    again = crw("flow", "resume", run.id, "--detach", "--state", str(crw.state), "--json")
    _pid(crw, again, "pid")
    assert TASK in _packet(run)
    _wait("the second started row", lambda: len(_started(run)) == 2)
    assert [row["inputs"] for row in _started(run)] == [recorded, recorded]


def _started(run: RunDir) -> list[dict[str, object]]:
    return [row for row in _rows(run) if row["row"] == "started"]


def test_a_missing_ill_typed_or_unknown_input_is_refused_before_any_run_exists(
    crw: Crw, tmp_path: Path
) -> None:
    """Exit 2, one line naming the input and its line in the workflow (an input given
    twice: the input); no run directory made, by start or validate."""
    workflow, _ = _files(tmp_path)
    cases = [
        ([], f"{workflow}:4: input 'issue': is required and has no value (the issue to fix); "),
        (
            ["--input-file", "issue=issue.md", "--input", "attempts=2.5"],
            f"{workflow}:8: input 'attempts': \"2.5\" is not an integer; give a whole number",
        ),
        (
            ["--input-file", "issue=issue.md", "--input", "colour=red"],
            f"{workflow}: no input 'colour' is declared; use one of: issue, attempts, strict",
        ),
        (
            ["--input-file", "issue=issue.md", "--input", "attempts=2", "--input", "attempts=3"],
            '--input attempts is given twice ("2" and "3"); give each input once',
        ),
    ]
    for args, line in cases:
        for command in (["start"], ["validate"], ["start", "--dry-run"]):
            result = crw("flow", *command, str(workflow), *args, "--state", str(crw.state))
            assert result.code == 2, (command, result.stdout, result.stderr)
            assert result.stderr.startswith(f"crw: error: {line}"), result.stderr
            assert result.stderr.count("\n") == 1
    assert not (crw.state / "flow").exists()


def test_validate_shows_the_plan_and_start_dry_run_is_the_same(crw: Crw, tmp_path: Path) -> None:
    """validate makes start's checks, asks no host (none listens), writes nothing,
    and shows the levels, each node's role, pair, schema, review and inputs, the
    inputs' values, the spawn formats and the warnings."""
    workflow, issue = _files(tmp_path)
    args = [str(workflow), "--input-file", "issue=issue.md", "--input", "strict=false"]
    args += ["--owner", "thread-1", "--host", f"unix:{tmp_path / 'nobody.sock'}"]
    out = crw("flow", "validate", *args, "--state", str(crw.state), "--json")
    assert out.code == 0, out.stderr
    plan = out.json()
    assert plan["valid"] is True
    assert plan["levels"] == [["explore"], ["build"]]
    explore, build = plan["nodes"]
    assert (explore["role"], explore["inputs"], explore["pair"]) == (
        "explorer",
        ["attempts", "issue", "strict"],
        {"agent_type": "explorer"},
    )
    assert build["review"] == {"role": "reviewer", "rounds": 2, "fix_effort": None}
    assert build["schema"] == {"type": "object", "properties": ["done"], "required": ["done"]}
    digest = "sha256:" + hashlib.sha256(issue.read_bytes()).hexdigest()
    assert plan["inputs"]["issue"]["value"] == {"path": str(issue.resolve()), "digest": digest}
    assert plan["inputs"]["strict"]["value"] is False
    assert [f["role"] for f in plan["spawn_formats"]][:2] == ["architect", "executor"]
    assert any("no git checkout holds the run" in w for w in plan["warnings"])
    dry = crw("flow", "start", "--dry-run", *args, "--state", str(crw.state), "--json")
    assert dry.code == 0, dry.stderr
    assert dry.json() == plan
    text = crw("flow", "validate", *args, "--state", str(crw.state))
    assert text.code == 0, text.stderr
    assert text.stdout.startswith("workflow with-inputs is valid: 2 nodes on 2 levels")
    assert "    1: explore\n    2: build\n" in text.stdout
    assert "      review: reviewer, up to 2 round(s)\n" in text.stdout
    assert text.stdout.rstrip().endswith(
        f"start it with: crw flow start {workflow} --owner thread-1 --host "
        f"unix:{tmp_path / 'nobody.sock'} --input strict=false --input-file issue=issue.md "
        f"--state {crw.state}"
    )
    assert not crw.state.exists()  # nothing written: no state directory, no run


def test_an_app_server_run_in_a_git_workspace_renders_its_inputs(
    crw: Crw, sim: Path, tmp_path: Path
) -> None:
    """On the App Server backend, in a git checkout: the executor's journaled turn
    input carries the rendered task, its work is committed on the node branch, and
    the started row records the inputs."""
    make_repo(tmp_path / "project")
    workflow = tmp_path / "w.toml"
    workflow.write_text(
        'name = "git-inputs"\nrepo = "project"\n[inputs.issue]\ntype = "file"\n'
        '[inputs.who]\ndescription = "who asked"\n[[node]]\nid = "build"\nrole = "executor"\n'
        'task = "Fix for {inputs.who}: {inputs.issue}"\nschema = { type = "object" }\n'
    )
    (tmp_path / "issue.md").write_text("ISSUE-TEXT")
    out = crw.start(
        str(workflow),
        "--backend",
        "app-server",
        "--host",
        f"unix:{sim}",
        "--input-file",
        "issue=issue.md",
        "--input",
        "who=bob",
    )
    assert out.code == 0, out.stderr
    run = RunDir(Path(out.json()["run_dir"]))
    wait_for_exit(run.root)
    rows = _rows(run)
    assert rows[-1]["row"] == "ended" and rows[-1]["status"] == "completed"
    published = [row for row in rows if row["row"] == "step_published"]
    assert "Fix for bob: ISSUE-TEXT" in published[0]["input"]
    assert [row["node_ref"] for row in rows if row["row"] == "crw_commit"] == [
        f"refs/crw/flow/{run.id}/nodes/build"
    ]
    digest = "sha256:" + hashlib.sha256(b"ISSUE-TEXT").hexdigest()
    path = str((tmp_path / "issue.md").resolve())
    assert _started(run)[0]["inputs"] == {"issue": {"path": path, "digest": digest}, "who": "bob"}


def test_validate_refuses_what_start_refuses_in_the_same_line(crw: Crw, tmp_path: Path) -> None:
    """A check of the start beyond the workflow file (an evidence cwd outside the
    repository, judged against the repository the start resolves) refuses validate
    and start --dry-run with start's own line, exit 2, nothing written."""
    make_repo(tmp_path / "project")
    workflow = tmp_path / "project" / "w.toml"
    workflow.write_text(
        'name = "w"\nevidence_cwd = "/etc"\n[[node]]\nid = "a"\nrole = "explorer"\n'
        'task = "Look."\nschema = { type = "object" }\n'
    )
    lines = set()
    for command in (["start"], ["validate"], ["start", "--dry-run"]):
        result = crw("flow", *command, str(workflow), "--state", str(crw.state))
        assert result.code == 2, (command, result.stdout, result.stderr)
        lines.add(result.stderr)
    (line,) = lines
    assert line.startswith(f'crw: error: {workflow}:2: evidence_cwd = "/etc" lies outside'), line
    assert not (crw.state / "flow").exists()
