"""Hints pasted into bash as printed, on a state directory whose path has a space and
with an input whose value has quotes, a newline and non-ASCII text: real `crw`
processes, the simulated host, and `bash -c` reading each printed command.

- `start`'s "see it with" and "take its steps with" name the state directory
  quoted;
- a session run there binds the subagent the owner spawned with the step's message
  (its packet's path has the space), and `owner spawn`'s report pastes;
- `validate`'s "start it with" starts what was validated: its backend, host and
  state, and the input's exact value;
- an ended run's "start a new run" gives the input's newline back, not `\\n`, and
  its `--json` fix is that whole command, though the value holds a `; `;
- `init`'s start line names its host and state quoted, and so do `host sim owner
  start`'s and `host sim script`'s hints their socket;
- `cancel` of an App Server run names no owner and no `next` (no owner runs it);
- a guide's `crw/examples/…` path started where no copy is says how to copy them,
  and the copy it prints makes the same command work;
- `gc --json` with nothing to remove, and `host sim script --json` of a behaviour
  that is not JSON, say what to do as their fix.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from crw.engine.run.rundir import RunDir
from crw.host.sim.process import launch_sim, stop_sim
from tests.cli.conftest import Crw, Result, wait_for_exit
from tests.cli.test_owner_sim import bound
from tests.cli.test_resume_env import _wait
from tests.cli.test_resume_env import sim as sim

NOTE = 'a "q" it\'s; b\nline two ünï'

WORKFLOW = """\
name = "pasted"

[inputs.note]
description = "a note"

[[node]]
id = "explore"
role = "explorer"
task = "Note: {inputs.note}"
schema = { type = "object" }
"""


def _spaced(tmp_path: Path) -> Crw:
    """A crw whose state directory is `tmp_path/my state/.crw`."""
    root = tmp_path / "my state"
    root.mkdir()
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir(exist_ok=True)
    return Crw(root / ".crw", tmpdir)


def _pasted(crw: Crw, line: str) -> Result:
    """Run a printed command line (`crw …` runs this checkout's crw) as bash reads it
    pasted."""
    script = f'crw() {{ "{sys.executable}" -m crw "$@"; }}\n{line}'
    done = subprocess.run(
        ["bash", "-c", script],
        env=crw.env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=crw.state.parent,
    )
    return Result(done.returncode, done.stdout, done.stderr)


def _after(stdout: str, label: str) -> str:
    lines = [line.split(label, 1)[1] for line in stdout.splitlines() if label in line]
    assert len(lines) == 1, stdout
    return lines[0]


def _spec(crw: Crw, run: str) -> dict[str, Any]:
    return dict(json.loads((crw.state / "flow" / run / "run.json").read_text()))


def _workflow(tmp_path: Path) -> Path:
    workflow = tmp_path / "pasted.toml"
    workflow.write_text(WORKFLOW)
    return workflow


def test_start_hints_paste_on_a_state_path_with_a_space(tmp_path: Path, sim: Path) -> None:
    crw = _spaced(tmp_path)
    try:
        out = crw(
            "flow", "start", str(_workflow(tmp_path)), "--host", f"unix:{sim}",
            "--input", "note=x", "--state", str(crw.state),
        )  # fmt: skip
        assert out.code == 0, out.stderr
        status = _pasted(crw, _after(out.stdout, "see it with: "))
        assert status.code == 0, status.stderr
        assert status.stdout.startswith("run pasted-"), status.stdout
        steps = _pasted(
            crw, _after(out.stdout, "take its steps with: ").replace("--wait 30", "--wait 0")
        )
        assert steps.code == 0, steps.stderr
    finally:
        crw.reap()


def test_a_session_run_on_a_state_path_with_a_space_binds_its_subagent(
    tmp_path: Path, sim: Path
) -> None:
    """spec: DISP-25: the step's message names its packet under `my state/`, and the
    run binds the subagent spawned with it."""
    crw = _spaced(tmp_path)
    try:
        owner = crw("host", "sim", "owner", "start", "--socket", str(sim), "--json")
        thread = str(owner.json()["thread_id"])
        out = crw(
            "flow", "start", str(_workflow(tmp_path)), "--host", f"unix:{sim}",
            "--owner", thread, "--input", "note=x", "--state", str(crw.state), "--json",
        )  # fmt: skip
        assert out.code == 0, out.stderr
        step = crw.state / "flow" / str(out.json()["run"]) / "steps" / "explore.1" / "t1-a1.json"
        _wait("explore.1's step", step.exists)
        spawned = crw("host", "sim", "owner", "spawn", str(step), "--socket", str(sim))
        assert spawned.code == 0, spawned.stderr
        report = _pasted(crw, _after(spawned.stdout, "report it: ") + " --json")
        assert bound(report) == "bound"
    finally:
        crw.reap()


def test_validates_start_line_starts_what_was_validated(tmp_path: Path, sim: Path) -> None:
    crw = _spaced(tmp_path)
    try:
        args = ["--backend", "app-server", "--host", f"unix:{sim}", "--input", f"note={NOTE}"]
        args += ["--state", str(crw.state)]
        checked = crw("flow", "validate", str(_workflow(tmp_path)), *args)
        assert checked.code == 0, checked.stderr
        assert f"note (string) = {json.dumps(NOTE, ensure_ascii=False)}  a note" in checked.stdout
        started = _pasted(crw, _after(checked.stdout, "start it with: "))
        assert started.code == 0, started.stderr
        run = started.stdout.split()[1]
        spec = _spec(crw, run)
        assert (spec["backend"], spec["host"], spec["inputs"]) == (
            "app-server",
            f"unix:{sim}",
            {"note": NOTE},
        )
        wait_for_exit(crw.state / "flow" / run)
        answer = ["flow", "answer", run, "explore.1", "--skip", "--state", str(crw.state)]
        again = crw(*answer)
        assert again.code == 1, again.stderr
        line = again.stderr.removeprefix("crw: error: ").rstrip("\n")
        command = line.split("start a new run: ", 1)[1]
        as_json = crw(*answer, "--json")
        assert as_json.json()["fix"] == f"to run it again, start a new run: {command}"
        restarted = _pasted(crw, command)
        assert restarted.code == 0, restarted.stderr
        assert _spec(crw, restarted.stdout.split()[1])["inputs"] == {"note": NOTE}
    finally:
        crw.reap()


def test_inits_start_line_pastes_on_a_host_and_state_with_spaces(tmp_path: Path) -> None:
    crw = _spaced(tmp_path)
    socket = tmp_path / "my host.sock"
    host = launch_sim(socket, tmp_path / "sim-home")
    try:
        init = crw("flow", "init", "--host", f"unix:{socket}", "--state", str(crw.state))
        assert init.code == 0, init.stderr
        line = _after(init.stdout, "then start a run: ")
        assert " --owner THREAD " in line and "THREAD is the owner thread's id" in init.stdout
        workflow = str(_workflow(tmp_path))
        owner = crw("host", "sim", "owner", "start", "--socket", str(socket))
        assert owner.code == 0, owner.stderr
        thread = owner.stdout.splitlines()[0]
        line = line.replace("WORKFLOW", f"'{workflow}' --input note=x").replace("THREAD", thread)
        started = _pasted(crw, f"{line} --json")
        assert started.code == 0, started.stderr
        assert _spec(crw, started.json()["run"])["host"] == f"unix:{socket}"
        (fact,) = [fact for fact in started.json()["facts"] if fact["name"] == "owner_bound"]
        assert fact["ok"] is True, fact
        owner = crw("host", "sim", "owner", "start", "--socket", str(socket))
        assert owner.code == 0, owner.stderr
        line = _after(owner.stdout, "start a session run on it: ")
        line = line.replace("WORKFLOW", f"'{workflow}' --input note=x")
        on_owner = _pasted(crw, f"{line} --state '{crw.state}'")
        assert on_owner.code == 0, on_owner.stderr
        script = ("host", "sim", "script", "--socket", str(socket))
        assert crw(*script, "build.1", '{"hang": true}').code == 0
        wide = crw(*script, "*", '{"seconds": 0.5}')
        assert wide.code == 0, wide.stderr
        listed = _pasted(crw, _after(wide.stdout, "list them: "))
        assert listed.code == 0, listed.stderr
        assert "build.1/*" in listed.stdout
    finally:
        crw.reap()
        stop_sim(host)


def test_cancel_of_an_app_server_run_names_no_owner(crw: Crw, sim: Path, tmp_path: Path) -> None:
    script = subprocess.run(
        [sys.executable, "-m", "crw", "host", "sim", "script", "--socket", str(sim), "*",
         '{"hang": true}'],
        capture_output=True, text=True, timeout=60, env=crw.env,
    )  # fmt: skip
    assert script.returncode == 0, script.stderr
    out = crw.start(
        str(_workflow(tmp_path)), "--backend", "app-server", "--host", f"unix:{sim}",
        "--input", "note=x",
    )  # fmt: skip
    assert out.code == 0, out.stderr
    run = RunDir(Path(out.json()["run_dir"]))
    _wait("the turn", lambda: b'"turn_started"' in run.journal.read_bytes())
    cancelled = crw("flow", "cancel", run.id, "--state", str(crw.state))
    assert cancelled.code == 0, cancelled.stderr
    assert cancelled.stdout == (
        f"run {run.id} cancelled; held: explore.1; see it with: "
        f"crw flow status {run.id} --state {crw.state}\n"
    )


def test_gc_with_nothing_to_remove_has_a_json_fix(crw: Crw) -> None:
    out = crw("flow", "gc", "--state", str(crw.state), "--json")
    assert out.code == 2
    assert out.json() == {
        "error": "gc needs what to remove",
        "fix": "pass --ended-before DATE or --older-than AGE (runs that ended before), "
        "or --refs (the refs of runs that no longer exist)",
    }


def test_a_behaviour_that_is_not_json_has_a_json_fix(crw: Crw, sim: Path) -> None:
    out = crw("host", "sim", "script", "--socket", str(sim), "x", "{hang: true}", "--json")
    assert out.code == 2
    assert out.json()["fix"] == """write it as '{"invalidFirst": true}'"""


def test_the_guides_example_path_names_the_copy_that_makes_it_work(crw: Crw) -> None:
    crw.state.parent.mkdir(parents=True, exist_ok=True)
    args = ("flow", "validate", "crw/examples/demo.toml", "--state", str(crw.state))
    missing = crw(*args, "--json")
    assert missing.code == 2
    error = missing.json()
    assert error["error"] == "crw/examples/demo.toml: no workflow file here"
    copy = _pasted(crw, error["fix"].split("): ", 1)[1])
    assert copy.code == 0, copy.stderr
    valid = crw(*args)
    assert valid.code == 0, valid.stderr
    assert valid.stdout.startswith("workflow demo is valid"), valid.stdout
