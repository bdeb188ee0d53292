"""`crw flow wait`, `crw flow start --wait` and `crw flow result` with real processes:
a `crw host sim serve` host scripted per test, app-server runs of the drill's
workflow (explore, build, review), and the waiters as a user runs them, piped.

Each exit code is reached for real: completed 0, failed (a null_model) 1, a held
call 3, a pause 4, a cancel 5, a timeout 124; a run whose process died is waited
on until it is resumed. Every process is reaped by pid at teardown (the drill's
`reap`: the host and each run process its started rows name; the waiters).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from crw.engine.run.locks import run_is_live
from crw.engine.run.rundir import RunDir
from tests.cli.conftest import REPO, Result
from tests.cli.test_show import Followers, watching
from tests.deadlines import LOADED
from tests.drill.test_app_server_crash_drill import AppDrill
from tests.drill.test_crash_drill import CALL, Drill, alive, drill_at, served, wait_until

HANG = {"match": {"marker": f"{CALL}/*"}, "behaviour": {"hang": True}}
FAIL = {"match": {"marker": f"{CALL}/t1-*"},
        "behaviour": {"fail": {"httpConnectionFailed": {"httpStatusCode": 502}}}}  # fmt: skip
BROKEN = {"match": {"marker": f"{CALL}/*"}, "behaviour": {"answer": {"nope": 1}, "seconds": 0.1}}
"""Every build turn answers what its schema refuses (the repair's too), in 0.1 s
(the simulator's default turn is 1 s)."""


@pytest.fixture
def drill(tmp_path: Path) -> Iterator[AppDrill]:
    with served(drill_at(AppDrill, tmp_path / "run")) as made:
        yield made


@pytest.fixture
def followers(drill: AppDrill) -> Iterator[Followers]:
    made = Followers(drill.root, drill.crw)
    try:
        yield made
    finally:
        for child in made.children:
            child.kill()
            child.wait(timeout=10)


def cli(drill: AppDrill, *args: str) -> Result:
    """`crw ARGS --state S`, piped, its output as it is."""
    done = subprocess.run(
        [sys.executable, "-m", "crw", *args, "--state", str(drill.crw.state)],
        env=drill.crw.env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
        timeout=LOADED, cwd=REPO,
    )  # fmt: skip
    return Result(done.returncode, done.stdout, done.stderr)


def start_waiting(drill: AppDrill, *args: str) -> Result:
    """`crw flow start … --wait ARGS` in the foreground, piped, as a script runs it."""
    argv = ["flow", "start", str(drill.workflow), "--backend", "app-server",
            "--host", f"unix:{drill.socket}", "--wait", *args]  # fmt: skip
    try:
        return cli(drill, *argv)
    finally:
        drill.run = RunDir(next((drill.crw.state / "flow").iterdir()))


def progress(run: str, state: str, done: int, total: int, flight: int, tokens: int) -> str:
    return f"-- run {run} {state}: {done}/{total} calls done, {flight} in flight, tokens {tokens}"


def tokens(rows: list[dict[str, Any]]) -> int:
    return sum((row.get("tokens") or {}).get("total", 0) for row in rows if row.get("call"))


def turn_runs(drill: AppDrill, n: int = 1) -> None:
    wait_until(f"build's turn {n} runs", lambda: sum(
        r["row"] == "turn_started" and r.get("call") == CALL for r in drill.rows()
    ) >= n, LOADED)  # fmt: skip


def test_start_wait_shows_progress_piped_and_exits_0_when_the_run_completes(
    drill: AppDrill,
) -> None:
    done = start_waiting(drill)
    assert done.code == 0, done.stderr
    assert drill.run is not None
    run, state, rows = drill.run.id, str(drill.crw.state), drill.rows()
    lines = done.stdout.splitlines()
    assert lines[0].startswith(f"run {run} started (app-server backend")
    steps = [line for line in lines if line.startswith("-- run ")]
    assert steps[-1] == progress(run, "ended", 3, 3, 0, tokens(rows))
    flight = [line.split(": ")[1] for line in steps if ": 1/3 calls done, 1 in flight" in line]
    assert flight == ["1/3 calls done, 1 in flight, tokens " + flight[0].rsplit(" ", 1)[1]], steps
    assert len(set(steps)) == len(steps)  # a line when something changed, never the same again
    assert lines[-1] == (
        f"run {run} completed (3/3 calls done, tokens {tokens(rows)}); "
        f"its answers: crw flow result {run} --state {state}"
    )

    again = cli(drill, "flow", "wait", run, "--json")
    assert again.code == 0, again.stderr
    out = again.json()
    assert (out["outcome"], out["exit"], out["state"], out["live"]) == (
        "completed",
        0,
        "ended",
        False,
    )
    assert (out["done"], out["total"], out["tokens"]["total"]) == (3, 3, tokens(rows))

    answers = cli(drill, "flow", "result", run, "--json")
    assert answers.code == 0, answers.stderr
    completed = {r["call"]: r["result"] for r in rows if r["row"] == "completed"}
    by_node = {"explore": "explore.1", "build": CALL, "review": "review.1"}
    assert answers.json()["answers"] == {node: completed[call] for node, call in by_node.items()}
    build = cli(drill, "flow", "result", run, "--call", CALL)
    assert (build.code, json.loads(build.stdout)) == (0, completed[CALL])


def test_a_null_model_fails_the_run_and_start_wait_json_exits_1_with_one_object(
    drill: AppDrill,
) -> None:
    """build answers what its schema refuses, again after the repair: it ends
    null_model, review never runs, the run ends failed."""
    drill.host("sim/script", BROKEN)
    done = start_waiting(drill, "--json")
    assert done.code == 1, done.stderr
    assert drill.run is not None
    run, state = drill.run.id, str(drill.crw.state)
    (line,) = done.stdout.splitlines()  # one object: the start's, with the wait's outcome
    out = json.loads(line)
    assert out["run"] == run and out["started"] is True
    assert out["wait"]["outcome"] == "failed" and out["wait"]["exit"] == 1
    assert out["wait"]["unfinished"] == {"build": "null_model", "review": "unrun"}

    human = cli(drill, "flow", "wait", run)
    assert human.code == 1
    assert human.stdout.splitlines()[-1].startswith(
        f"run {run} failed: build null_model, review unrun (2/2 calls done"
    )
    assert human.stdout.splitlines()[-1].endswith(f"see why: crw flow status {run} --state {state}")
    result = cli(drill, "flow", "result", run, "--json")
    assert result.code == 1
    assert list(result.json()["answers"]) == ["explore"]
    assert result.json()["nodes"][1:] == [
        {"node": "build", "end": "null_model", "call": None},
        {"node": "review", "end": "unrun", "call": None},
    ]
    none = cli(drill, "flow", "result", run, "--call", CALL)
    assert none.code == 1
    assert none.stdout == (
        f"call {CALL} of run {run} has no answer: it is null_model (schema_invalid_after_repair); "
        f"see why with: crw flow status {run} --state {state}\n"
    )


def test_a_held_call_ends_the_wait_with_3_once_no_process_runs_the_run(
    drill: AppDrill, followers: Followers
) -> None:
    """The host fails build's turn: the call is held, the run's process leaves the
    run waiting_decision, and only then does the waiter end (docs/decisions.md)."""
    drill.host("sim/script", FAIL)
    drill.start(crash_after=None)
    assert drill.run is not None
    run, state = drill.run.id, str(drill.crw.state)
    waiter = followers.start("wait", "flow", "wait", run)
    code = waiter.wait(timeout=LOADED)
    out = followers.output("wait").splitlines()
    assert code == 3, out
    assert not run_is_live(drill.run)
    assert out[-1] == (
        f"run {run} waits for a decision on {CALL} (host_failure): answer each with crw flow "
        f"answer {run} CALL --retry|--skip|--abort --state {state} "
        f"(crw flow status {run} --state {state} names each command)"
    )
    assert out[-2].startswith(f"-- run {run} waiting_decision: 1/3 calls done")
    held = cli(drill, "flow", "wait", run, "--json")
    assert held.code == 3
    assert (held.json()["outcome"], held.json()["held"]) == ("waiting_decision", [CALL])
    result = cli(drill, "flow", "result", run)
    assert result.code == 3
    assert result.stdout == (
        f"run {run} has not ended (waiting_decision): it has no final answers yet; "
        f"see what it waits for with: crw flow status {run} --state {state}\n"
    )
    assert cli(drill, "flow", "result", run, "--call", "explore.1").code == 0


def test_pause_ends_the_wait_with_4_a_timeout_with_124_and_cancel_with_5(
    drill: AppDrill, followers: Followers
) -> None:
    drill.host("sim/script", HANG)
    drill.start(crash_after=None)
    assert drill.run is not None
    run, state = drill.run.id, str(drill.crw.state)
    turn_runs(drill)

    timed = cli(drill, "flow", "wait", run, "--timeout", "0.5")
    assert timed.code == 124, timed.stderr
    assert timed.stdout.splitlines() == [
        progress(run, "running", 1, 3, 1, tokens(drill.rows())),
        f"run {run} has not ended after 0.5s (running, 1/3 calls done, tokens "
        f"{tokens(drill.rows())}); wait again with: crw flow wait {run} --state {state}",
    ]
    as_json = cli(drill, "flow", "wait", run, "--timeout", "0", "--json")
    assert (as_json.code, as_json.json()["outcome"], as_json.json()["live"]) == (
        124,
        "timeout",
        True,
    )

    piped = followers.start("paused", "flow", "wait", run)
    wait_until("the waiter sleeps on an inotify watch", lambda: watching(piped.pid), LOADED)
    assert cli(drill, "flow", "pause", run).code == 0
    paused = followers.ended("paused", piped)
    assert paused.code == 4, paused.stdout
    assert paused.stdout.splitlines()[-1] == (
        f"run {run} paused by crw flow pause; go on with: "
        f"crw flow resume {run} --detach --state {state}"
    )
    assert paused.stdout.splitlines()[-2].startswith(f"-- run {run} paused: 1/3 calls done")

    resumed = cli(drill, "flow", "resume", run, "--detach", "--json")
    assert resumed.code == 0, resumed.stderr
    turn_runs(drill, 2)  # the paused call runs again, and hangs again
    cancelled_waiter = followers.start("cancelled", "flow", "wait", run, "--json")
    wait_until("the waiter sleeps", lambda: watching(cancelled_waiter.pid), LOADED)
    assert cli(drill, "flow", "cancel", run).code == 0
    cancelled = followers.ended("cancelled", cancelled_waiter)
    assert cancelled.code == 5, cancelled.stdout
    out = json.loads(cancelled.stdout)
    assert (out["outcome"], out["exit"], out["reason"]) == ("cancelled", 5, "cancelled")
    result = cli(drill, "flow", "result", run, "--json")
    assert (result.code, list(result.json()["answers"])) == (5, ["explore"])


def test_a_run_whose_process_died_is_waited_on_until_it_is_resumed_and_ends(
    drill: AppDrill, followers: Followers
) -> None:
    """It has not ended: the waiter says no process runs it (and the command that
    goes on), waits on, and ends with the run once it is resumed."""
    drill.start(crash_after=f"turn_started@{CALL}")
    assert drill.run is not None
    run, state = drill.run.id, str(drill.crw.state)
    wait_until(
        "the run process is gone",
        lambda: (
            any(r["row"] == "started" for r in drill.rows())
            and not alive(next(r["pid"] for r in drill.rows() if r["row"] == "started"))
        ),
        LOADED,
    )
    dir_ = drill.run
    wait_until("its locks are let go", lambda: not run_is_live(dir_))

    resume = f"crw flow resume {run} --detach --state {state}"
    timed = cli(drill, "flow", "wait", run, "--timeout", "0")
    assert timed.code == 124
    assert timed.stdout.splitlines()[-1].endswith(
        f"; no process runs it: resume it with {resume}; "
        f"wait again with: crw flow wait {run} --state {state}"
    )
    waiter = followers.start("wait", "flow", "wait", run)
    gone = f"; no process runs it: waiting until it is resumed ({resume})"
    wait_until("the waiter says no process runs the run",
               lambda: gone in followers.output("wait"), LOADED)  # fmt: skip
    assert waiter.poll() is None
    assert cli(drill, "flow", "resume", run, "--detach").code == 0
    ended = followers.ended("wait", waiter)
    assert ended.code == 0, ended.stdout
    assert ended.stdout.splitlines()[-1].startswith(f"run {run} completed (3/3 calls done")


@pytest.fixture
def session(tmp_path: Path) -> Iterator[Drill]:
    """A session run's drill: the owner process takes its steps."""
    with served(drill_at(Drill, tmp_path / "session")) as made:
        yield made


def test_wait_follows_a_session_run_through_the_owner_s_steps_to_its_end(
    session: Drill, followers_of_session: Followers
) -> None:
    """spec: GEN-1 (a session run's calls are the owner's subagents): the waiter
    ends with the run the owner plays to its end, exit 0, its lines piped."""
    session.start(crash_after=None)
    assert session.run is not None
    run = session.run.id
    waiter = followers_of_session.start("session", "flow", "wait", run)
    rows = session.finish()
    ended = followers_of_session.ended("session", waiter)
    assert ended.code == 0, ended.stdout + ended.stderr
    lines = ended.stdout.splitlines()
    assert lines[-2] == progress(run, "ended", 3, 3, 0, tokens(rows))
    assert lines[-1].startswith(f"run {run} completed (3/3 calls done, tokens {tokens(rows)})")


@pytest.fixture
def followers_of_session(session: Drill) -> Iterator[Followers]:
    made = Followers(session.root, session.crw)
    try:
        yield made
    finally:
        for child in made.children:
            child.kill()
            child.wait(timeout=10)
