"""Hints followed literally: each command a hint prints is run as printed, with real
processes (a `crw host sim serve` host, the run's process, each command), and does
what the hint says it does.

- an ended run's "start a new run" command starts on the run's host and owner;
- a held call of an ended (cancelled) run is offered no answer, and `answer`
  refuses it in one line naming that start;
- `pause` names the detached resume, which returns at once with the run going on;
- a report of the subagent the run found by its marker and answered is told so
  plainly.
"""

from __future__ import annotations

import json
import shlex
import time
from pathlib import Path
from typing import Any

from crw.engine.run.locks import run_is_live
from crw.engine.run.rundir import RunDir
from crw.journal.log import read_journal
from tests.cli.conftest import Crw, Result
from tests.cli.test_owner_sim import _owner, _script
from tests.cli.test_resume_env import sim as sim
from tests.deadlines import LOADED

WORKFLOW = """\
name = "hints"
pool = 1

[[node]]
id = "explore"
role = "explorer"
task = "List the modules that handle configuration."
schema.type = "object"
schema.required = ["files"]
schema.properties.files = { type = "array", items = { type = "string" } }

[[node]]
id = "build"
role = "executor"
needs = ["explore"]
task = "Fix it, starting from {explore.files}."
schema = { type = "object", required = ["summary"], properties = { summary = { type = "string" } } }
"""


def _wait(what: str, done: Any, timeout: float = LOADED) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _rows(crw: Crw, run: str) -> list[dict[str, Any]]:
    return read_journal(crw.state / "flow" / run / "journal.jsonl").rows


def _literally(crw: Crw, command: str) -> Result:
    """Run a printed `crw …` command as a user pastes it."""
    words = shlex.split(command)
    assert words[0] == "crw", command
    return crw(*words[1:])


def _started(crw: Crw, sim: Path, tmp_path: Path) -> tuple[str, str]:
    """A session run of WORKFLOW on the sim host with an owner of its own, its
    first step published; (run, owner)."""
    workflow = tmp_path / "hints.toml"
    workflow.write_text(WORKFLOW)
    owner = _owner(crw, "start", "--socket", str(sim), "--json").json()["thread_id"]
    start = crw.start(str(workflow), "--owner", owner, "--host", f"unix:{sim}")
    assert start.code == 0, start.stderr
    run = str(start.json()["run"])
    step = crw.state / "flow" / run / "steps" / "explore.1" / "t1-a1.json"
    _wait("explore.1's step", step.exists)
    return run, owner


def _cancelled_with_a_held_call(crw: Crw, sim: Path, tmp_path: Path) -> tuple[str, str]:
    """`_started`, explore.1's subagent spawned and working, then the run cancelled:
    explore.1 held (cancelled) in an ended run."""
    _script(sim, {"seconds": 60})  # explore.1's turn runs until it is interrupted
    run, owner = _started(crw, sim, tmp_path)
    step = crw.state / "flow" / run / "steps" / "explore.1" / "t1-a1.json"
    spawned = _owner(crw, "spawn", str(step), "--socket", str(sim), "--owner", owner)
    assert spawned.code == 0, spawned.stderr
    _wait("explore.1's turn", lambda: "turn_started" in [r["row"] for r in _rows(crw, run)])
    cancelled = crw("flow", "cancel", run, "--state", str(crw.state))
    assert cancelled.code == 0, cancelled.stderr
    held = [r for r in _rows(crw, run) if r["row"] == "held"]
    assert [r["call"] for r in held] == ["explore.1"]
    return run, owner


def _start_hint(status: Result) -> str:
    """The command under status's "start a new run:" (on its own line, kept whole)."""
    lines = status.stdout.splitlines()
    (at,) = [n for n, line in enumerate(lines) if line.strip().endswith("start a new run:")]
    return lines[at + 1].strip()


def test_an_ended_runs_start_hint_starts_a_run_on_its_host_and_owner(
    crw: Crw, sim: Path, tmp_path: Path
) -> None:
    """The "start a new run" command status prints for a cancelled run, pasted as it
    is, starts a run whose run.json names the same host and owner thread (a session
    run's host is no default of the shell it is pasted into)."""
    run, owner = _cancelled_with_a_held_call(crw, sim, tmp_path)
    status = crw("flow", "status", run, "--state", str(crw.state))
    assert status.code == 0, status.stderr
    again = _start_hint(status)
    started = _literally(crw, again)
    assert started.code == 0, started.stdout + started.stderr
    (directory,) = [
        line.split(": ", 1)[1]
        for line in started.stdout.splitlines()
        if line.startswith("  run directory: ")
    ]
    first = json.loads((crw.state / "flow" / run / "run.json").read_text())
    second = json.loads((Path(directory) / "run.json").read_text())
    assert second["id"] != run
    assert (second["host"], second["owner"]) == (f"unix:{sim}", owner)
    assert {k: second[k] for k in ("host", "owner", "backend", "workflow")} == {
        k: first[k] for k in ("host", "owner", "backend", "workflow")
    }
    assert crw("flow", "cancel", second["id"], "--state", str(crw.state)).code == 0


def test_a_held_call_of_a_cancelled_run_is_offered_no_answer_and_answer_says_why(
    crw: Crw, sim: Path, tmp_path: Path
) -> None:
    """A held call of an ended run takes no answer (`decide_answer` refuses it), so
    status, next, list and show offer none; `answer` refuses it (exit 1) in one line
    saying why and naming the start that runs the work again."""
    run, _owner_id = _cancelled_with_a_held_call(crw, sim, tmp_path)
    state = str(crw.state)
    status = crw("flow", "status", run, "--state", state)
    status_json = crw("flow", "status", run, "--state", state, "--json")
    views = [
        status,
        status_json,
        crw("flow", "next", run, "--state", state),
        crw("flow", "next", run, "--state", state, "--json"),
        crw("flow", "list", "--state", state),
        crw("flow", "show", run, "--state", state),
    ]
    for view in views:
        assert view.code == 0, view.stderr
        assert "crw flow answer" not in view.stdout, view.stdout
    (call,) = [c for c in status_json.json()["calls"] if c["call"] == "explore.1"]
    assert call["state"] == "held" and "answer" not in call
    assert "    held (cancelled): the run has ended; it takes no answer" in status.stdout
    again = _start_hint(status)
    before = _rows(crw, run)
    for choice in ("--retry", "--restart"):
        refused = crw("flow", "answer", run, "explore.1", choice, "--state", state)
        assert (refused.code, refused.stdout) == (1, "")
        assert refused.stderr == (
            f"crw: error: run {run} has ended (cancelled): its call explore.1 takes no "
            f"answer, nothing would run it; to run it again, start a new run: {again}\n"
        )
    assert _rows(crw, run) == before


def test_pause_names_the_detached_resume_and_that_command_returns_with_the_run_going_on(
    crw: Crw, sim: Path, tmp_path: Path
) -> None:
    """spec: HARV-28: `pause` (and a pause of a paused run) says `resume RUN --detach`
    with the --state it was given; pasted, that resume returns at once (the foreground
    one would hold the terminal, silent, until the run ends) and a process holds
    the run again."""
    run, _owner_id = _started(crw, sim, tmp_path)
    state = str(crw.state)
    resume = f"crw flow resume {run} --detach --state {state}"
    paused = crw("flow", "pause", run, "--state", state)
    assert paused.code == 0, paused.stderr
    assert paused.stdout.endswith(f"; resume it with: {resume}\n"), paused.stdout
    again = crw("flow", "pause", run, "--state", state)
    assert again.stdout == f"run {run} is already paused; resume it with: {resume}\n"
    count = len([r for r in _rows(crw, run) if r["row"] == "started"])
    went_on = _literally(crw, paused.stdout.rsplit("resume it with: ", 1)[1].strip())
    assert went_on.code == 0, went_on.stderr
    assert went_on.stdout.startswith(f"run {run} resumed in process "), went_on.stdout
    assert len([r for r in _rows(crw, run) if r["row"] == "started"]) == count + 1
    assert run_is_live(RunDir(crw.state / "flow" / run))


def test_a_report_of_the_subagent_the_run_found_and_answered_says_so_plainly(
    crw: Crw, sim: Path, tmp_path: Path
) -> None:
    """spec: DISP-13, CMD-DISP-6: the owner spawns explore.1's step and reports it
    only after the run bound that subagent by its marker and took its answer: the
    printed `dispatched` answers close, "already bound by its marker and answered;
    close it", and exits 1 as every reply but bound does."""
    _script(sim, {"seconds": 0.1})
    run, owner = _started(crw, sim, tmp_path)
    step = crw.state / "flow" / run / "steps" / "explore.1" / "t1-a1.json"
    spawned = _owner(crw, "spawn", str(step), "--socket", str(sim), "--owner", owner)
    assert spawned.code == 0, spawned.stderr
    _wait(
        "the run answers explore.1 by its marker",
        lambda: any(r["row"] == "completed" for r in _rows(crw, run)),
    )
    line = spawned.stdout.splitlines()[-1]
    assert line.startswith("report it: crw flow dispatched "), spawned.stdout
    printed = line.removeprefix("report it: ")
    reply = _literally(crw, printed)
    (agent,) = [r["thread_id"] for r in _rows(crw, run) if r["row"] == "thread_started"]
    assert (reply.code, reply.stderr) == (1, "")
    assert reply.stdout == (
        f"close: {agent} is explore.1's subagent, already bound by its marker and "
        "answered; close it (nothing is wrong: every reply but bound exits 1)\n"
    )
    again = _literally(crw, printed + " --json")
    assert again.code == 1
    assert (again.json()["reply"], again.json()["reason"]) == (
        "close",
        "already bound by its marker and answered; close it",
    )


def test_the_start_hint_of_an_app_server_run_names_its_private_hosts_binary() -> None:
    """An app-server run on a private `codex` host started with --codex-bin is started
    again with that binary; quoting keeps a path with a space one word; a spec that
    names no workflow has no start to offer."""
    from crw.cli.read.run_spec import start_again

    spec = {
        "workflow": {"path": "/w/a b.toml", "digest": "d"},
        "backend": "app-server",
        "host": "codex",
        "owner": None,
        "codex_bin": "/opt/codex/bin/codex",
    }
    assert start_again(spec, "'/s t'") == (
        "crw flow start '/w/a b.toml' --backend app-server --host codex "
        "--codex-bin /opt/codex/bin/codex --state '/s t'"
    )
    assert start_again({"backend": "session"}, "") is None


def test_the_start_hint_gives_the_runs_inputs_again() -> None:
    """A run with inputs is started again with the values run.json records, a file
    input from the path its start read."""
    from crw.cli.read.run_spec import start_again

    spec = {
        "workflow": {"path": "/w/a.toml", "digest": "d"},
        "backend": "app-server",
        "host": "codex",
        "inputs": {
            "issue": {"path": "/w/my issue.md", "digest": "sha256:ab"},
            "attempts": 2,
            "strict": False,
            "who": "bob smith",
        },
    }
    assert start_again(spec, "") == (
        "crw flow start /w/a.toml --backend app-server --host codex "
        "--input-file 'issue=/w/my issue.md' --input attempts=2 --input strict=false "
        "--input 'who=bob smith'"
    )
