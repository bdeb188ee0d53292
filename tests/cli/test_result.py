"""`crw flow result` of the demo run (a reviewed node's answer is the one its review
accepted), `wait` drawn on a terminal, a corrupt journal under both, and `start
--timeout` without `--wait`: real `crw` processes, reaped by pid at teardown (the
`crw` fixture)."""

from __future__ import annotations

import contextlib
import json
import os
import pty
import subprocess
import sys
from pathlib import Path

from crw.engine.run.rundir import RunDir
from tests.cli.conftest import REPO, Crw, wait_for_exit
from tests.cli.test_status import WORKFLOW as STATUS_WORKFLOW
from tests.cli.test_status import _journal_line as journal_line
from tests.deadlines import LOADED


def test_result_of_the_demo_run_gives_each_node_the_answer_its_review_accepted(
    crw: Crw,
) -> None:
    """The demo's build is reviewed: build.2 rejects build.1, build.3 fixes it and
    build.4 accepts: build's answer is build.3's. On a terminal `wait` draws its
    rich line; --call prints one call's answer as JSON whatever it is."""
    demo = crw("flow", "demo", "--state", str(crw.state), "--json")
    assert demo.code == 0, demo.stderr
    crw.pids += [demo.json()["host_pid"]]
    run = demo.json()["run"]
    state = ("--state", str(crw.state))
    status = crw("flow", "status", run, "--results", "--json", *state).json()
    answer = {call["call"]: call["result"] for call in status["calls"]}

    result = crw("flow", "result", run, "--json", *state)
    assert result.code == 0, result.stderr
    assert result.json() == {
        "run": run,
        "outcome": "completed",
        "exit": 0,
        "answers": {
            "explore": answer["explore.1"],
            "plan": answer["plan.1"],
            "build": answer["build.3"],
            "critique": answer["critique.1"],
        },
        "nodes": [
            {"node": node, "end": "completed", "call": call}
            for node, call in [
                ("explore", "explore.1"),
                ("plan", "plan.1"),
                ("build", "build.3"),
                ("critique", "critique.1"),
            ]
        ],
    }
    human = crw("flow", "result", run, *state)
    assert human.code == 0
    lines = human.stdout.splitlines()
    assert lines[0] == f"run {run} ended completed: 4 of 4 nodes answered"
    build = lines.index("build (build.3):")
    assert (
        json.loads("\n".join(lines[build + 1 : lines.index("critique (critique.1):")]))
        == (answer["build.3"])
    )
    review = crw("flow", "result", run, "--call", "build.2", *state)
    assert (review.code, json.loads(review.stdout)["verdict"]) == (0, "reject")
    missing = crw("flow", "result", run, "--call", "build.9", *state)
    assert missing.code == 2
    assert missing.stderr.startswith(f'crw: error: run {run} has no call "build.9" (its calls: ')

    drawn = on_a_terminal(crw, "flow", "wait", run, *state)
    assert f"waiting for run {run} (Ctrl-C stops the wait, not the run)" in drawn
    assert "\x1b[" in drawn and "━" in drawn, "no rich drawing"
    assert "7/7 calls done, 0 in flight, tokens" in drawn and ", ended" in drawn
    assert f"run {run} completed (7/7 calls done" in drawn


def on_a_terminal(runner: Crw, *args: str) -> str:
    """`crw ARGS` on a pseudo-terminal, once it exited 0: what it drew."""
    main, side = pty.openpty()
    env = runner.env | {"TERM": "xterm-256color", "COLUMNS": "120", "LINES": "40"}
    child = subprocess.Popen(
        [sys.executable, "-m", "crw", *args], stdin=subprocess.DEVNULL, stdout=side,
        stderr=subprocess.DEVNULL, env=env, cwd=REPO,
    )  # fmt: skip
    os.close(side)
    drawn = b""
    try:
        with contextlib.suppress(OSError):  # EIO: the child closed its side
            while chunk := os.read(main, 65536):
                drawn += chunk
        assert child.wait(timeout=LOADED) == 0
    finally:
        child.kill()
        child.wait(timeout=10)
        os.close(main)
    return drawn.decode(errors="replace")


def test_start_timeout_without_wait_is_refused_before_any_run_exists(crw: Crw) -> None:
    refused = crw("flow", "start", str(REPO / "crw/examples/demo.toml"), "--timeout", "5",
                  "--state", str(crw.state))  # fmt: skip
    assert refused.code == 2
    assert refused.stderr == (
        "crw: error: --timeout is how long --wait waits: pass --wait too, or drop --timeout\n"
    )
    assert not (crw.state / "flow").exists()


def test_start_dry_run_with_wait_is_refused_rather_than_ignored(crw: Crw) -> None:
    """A dry run starts nothing, so --wait (or --timeout) beside it is a mistake
    said in one line, with nothing written."""
    demo = str(REPO / "crw/examples/demo.toml")
    for extra in (("--wait",), ("--wait", "--timeout", "5"), ("--timeout", "5")):
        refused = crw("flow", "start", demo, "--dry-run", *extra, "--state", str(crw.state))
        assert refused.code == 2, refused.stderr
        assert refused.stderr == (
            "crw: error: --dry-run starts no run, so there is nothing to --wait for: "
            "drop --wait (and --timeout), or drop --dry-run\n"
        )
        assert not (crw.state / "flow").exists()


def test_wait_and_result_of_a_corrupt_journal_say_where_the_damage_is(crw: Crw) -> None:
    """Exit 1 with the damage and its fix: in one line each, or as JSON on stdout."""
    out = crw.start(STATUS_WORKFLOW, "--owner", "o").json()
    run = RunDir(Path(out["run_dir"]))
    wait_for_exit(run.root)
    with open(run.journal, "a") as journal:
        damaged_at = journal.tell()
        journal.write(journal_line(3, "prepared", call="a.1").replace("prepared", "pr3pared"))
        journal.write(journal_line(4, "prepared", call="b.1"))
    state = ("--state", str(crw.state))
    for command in ("wait", "result"):
        human = crw("flow", command, out["run"], *state)
        assert human.code == 1, human.stderr
        assert human.stdout.startswith(
            f"run {out['run']}: journal {run.journal} is damaged at byte {damaged_at} ("
        )
        as_json = crw("flow", command, out["run"], *state, "--json")
        assert as_json.code == 1
        assert as_json.json()["corrupt"]["offset"] == damaged_at
        assert "kept as it is" in as_json.json()["fix"]
