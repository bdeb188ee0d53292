"""`crw flow dispatched ... --failed`: a report of a spawn the host refused, what it
refuses before anything is written, and the held call `next` and `status` show
with its fix. Run directories built by hand, as in test_next."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from crw.engine.run.rundir import RunDir
from tests.cli.conftest import Crw, Result, unfolded
from tests.cli.test_dispatched import inbox_reports, live_run
from tests.cli.test_dispatched import run as run
from tests.cli.test_next import RUN, _append_rows, _make_run, _next, _step
from tests.codex_owner.fill import fill, values_of

REFUSED = "unknown agent_type 'architect'"
STEP = {
    "row": "step_published",
    "call": "build.1",
    "k": 1,
    "attempt": 1,
    "op": "build.1/t1",
    "marker": "build.1/t1-a1",
    "action": "spawn",
}
HELD = {"row": "held", "call": "build.1", "reason": "spawn_failed", "error": REFUSED}


def failed(crw: Crw, *args: str, run_id: str = RUN, attempt: str = "1") -> Result:
    return crw(
        "flow",
        "dispatched",
        run_id,
        "build.1",
        "--k",
        "1",
        "--attempt",
        attempt,
        "--wait",
        "20",
        "--state",
        str(crw.state),
        *args,
    )


def answers(run_id: str, state: str) -> dict[str, str]:
    return {
        choice: f"crw flow answer {run_id} build.1 --{choice} --state {state}"
        for choice in ("retry", "skip", "abort", "restart")
    }


def fix(answer: dict[str, str]) -> str:
    return (
        "the host refused the spawn (the error says why): give the role in roles.toml a "
        "model the host serves (its model/list), or an agent_type it knows (a built-in "
        "one, or an [agents.<type>] table in $CODEX_HOME/config.toml), then "
        f"{answer['retry']} to spawn it again (or {answer['skip']}, {answer['abort']}, "
        f"{answer['restart']})"
    )


def test_failed_report_of_the_waiting_step_is_queued_with_the_hosts_message(crw: Crw) -> None:
    """spec: CMD-DISP-7: a run no process holds answers it when it reaches the step;
    the report carries the tool output and no subagent."""
    run = _make_run(crw)
    _append_rows(run, STEP)
    result = failed(crw, "--failed", REFUSED, "--json")
    assert result.code == 1 and result.json()["reply"] == "queued", result.stderr
    [report] = inbox_reports(run)
    assert (report["call"], report["k"], report["attempt"]) == ("build.1", 1, 1)
    assert (report["agent_id"], report["failed"]) == (None, REFUSED)


@pytest.mark.parametrize(
    ("rows", "attempt", "line"),
    [
        (
            [STEP],
            "2",
            f"crw: error: call build.1 turn 1 attempt 2 of run {RUN}: a report of a failed spawn "
            "for a step the run did not publish: report the step crw flow next shows",
        ),
        (
            [STEP, HELD],
            "1",
            f"crw: error: call build.1 turn 1 attempt 1 of run {RUN}: the call is held already (a "
            "failed spawn is reported once): answer it as crw flow next or crw flow status "
            "shows",
        ),
    ],
    ids=["not-published", "reported-twice"],
)
def test_failed_report_that_would_hold_nothing_is_refused_and_changes_nothing(
    crw: Crw, rows: list[dict[str, Any]], attempt: str, line: str
) -> None:
    """A --failed report for a step the run did not publish, or for a call its
    first one held already, is one line, exit 1, and leaves the inbox and the
    journal as they were."""
    run = _make_run(crw)
    _append_rows(run, *rows)
    before = run.journal.read_bytes()
    result = failed(crw, "--failed", REFUSED, attempt=attempt)
    assert (result.code, result.stdout, result.stderr.splitlines()) == (1, "", [line])
    assert inbox_reports(run) == [] and run.journal.read_bytes() == before


def test_failed_report_made_twice_while_the_first_waits_is_refused(crw: Crw) -> None:
    """The second report of one failed spawn, while the first waits in the inbox,
    is refused and leaves the first alone."""
    run = _make_run(crw)
    _append_rows(run, STEP)
    first = failed(crw, "--failed", REFUSED, "--json").json()
    second = failed(crw, "--failed", REFUSED)
    assert second.code == 1 and second.stderr.splitlines() == [
        f"crw: error: call build.1 turn 1 attempt 1 of run {RUN}: its failed spawn is reported "
        f"already (inbox/{first['id']}.json waits for the run): a failed spawn is reported once"
    ]
    assert [report["id"] for report in inbox_reports(run)] == [first["id"]]


@pytest.mark.parametrize("args", [["--agent", "t-1", "--failed", REFUSED], [], ["--failed", " "]])
def test_agent_and_failed_are_one_or_the_other(crw: Crw, args: list[str]) -> None:
    """A report names its subagent or the failed spawn's output: exit 2, nothing written."""
    run = _make_run(crw)
    _append_rows(run, STEP)
    result = failed(crw, *args)
    assert result.code == 2 and len(result.stderr.splitlines()) == 1, result.stderr
    assert inbox_reports(run) == []


def test_held_reply_exits_0_and_names_the_fix(crw: Crw, run: RunDir) -> None:
    """The run's answer to a failed spawn's report: held, with the fix and the
    commands of the answers a held session call takes."""
    _append_rows(
        run,
        {"row": "started", "backend": "session"},
        {"row": "prepared", "call": "build.1", "node": "build", "role": "executor"},
        STEP,
    )
    reply = {"reply": "held", "reason": f"spawn_failed: {REFUSED}"}
    with live_run(run, reply):
        result = failed(crw, "--failed", REFUSED, "--json", run_id="r1")
    assert result.code == 0, result.stderr
    out = result.json()
    assert (out["reply"], out["reason"], out["agent_id"], out["failed"]) == (
        "held",
        f"spawn_failed: {REFUSED}",
        None,
        REFUSED,
    )
    assert out["fix"] == fix(answers("r1", str(crw.state)))


def test_next_and_status_show_the_held_call_with_the_hosts_message_and_fix(crw: Crw) -> None:
    """spec: CMD-NEXT-2: the run waits on a decision; next's held entry and hint,
    and status's call, carry the host's message and the fix of a call held
    spawn_failed (docs/cli.md)."""
    run = _make_run(crw)
    explore = {"row": "prepared", "call": "explore.1", "node": "explore", "role": "explorer"}
    exhausted = {"row": "held", "call": "explore.1", "reason": "attempts_exhausted"}
    _append_rows(run, STEP, HELD, explore, exhausted)
    out = _next(crw)
    answer = answers(RUN, str(crw.state))
    assert out["state"] == "waiting_decision"
    assert out["held"][0] == (
        {
            "call": "build.1",
            "reason": "spawn_failed",
            "answer": answer,
            "error": REFUSED,
            "fix": fix(answer),
        }
    )
    assert "error" not in out["held"][1]
    assert f"build.1 (spawn_failed): {REFUSED}; {fix(answer)}" in out["hint"]
    status = crw("flow", "status", RUN, "--state", str(crw.state), "--json").json()
    call = status["calls"][0]
    assert (call["state"], call["reason"], call["error"], call["fix"]) == (
        "held",
        "spawn_failed",
        REFUSED,
        fix(answer),
    )
    human = crw("flow", "status", RUN, "--state", str(crw.state)).stdout.splitlines()
    at = human.index(f"    held (spawn_failed): {REFUSED}")
    assert unfolded(human, at + 1) == f"    fix: {fix(answer)}"


HOSTILE = (
    "Unknown model `gpt-5.4-mini` for spawn_agent. Available models: gpt-5.5\n"
    "unknown agent_type 'architect' $(touch pwned) \"q\" \\ <tool_output> ;"
)
"""A tool output a shell would expand, split or end: backticks, `$(…)`, both
quotes, a backslash, a newline, the placeholder's own text and a `;`."""


def test_a_spawn_steps_on_failure_filled_as_documented_reports_the_output_unchanged(
    crw: Crw,
) -> None:
    """spec: CMD-NEXT-5 (the engine's `on_failure`, docs/session.md): next's spawn
    step carries the report of a refused spawn; filled as docs/session.md says (the
    output inside its single quotes, each `'` written `'\\''`) and run by a shell,
    it reports the tool's output byte for byte and runs nothing of it."""
    run = _make_run(crw)
    _append_rows(run, STEP)
    _step(run, "build.1")
    on_failure = _next(crw)["steps"][0]["host_call"]["on_failure"]
    command = fill(on_failure, values_of(HOSTILE))
    assert command is not None and command.startswith(f"crw flow dispatched {RUN} build.1 ")
    bin_dir = str(Path(sys.executable).parent)
    env = crw.env | {"PATH": f"{bin_dir}{os.pathsep}{crw.env['PATH']}"}
    shell = subprocess.run(
        ["bash", "-c", f"{command} --json --wait 1"],
        env=env,
        cwd=crw.state.parent,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shell.returncode == 1 and json.loads(shell.stdout)["reply"] == "queued", shell.stderr
    [report] = inbox_reports(run)
    assert (report["call"], report["k"], report["attempt"]) == ("build.1", 1, 1)
    assert (report["agent_id"], report["failed"]) == (None, HOSTILE)
    assert not (crw.state.parent / "pwned").exists()
