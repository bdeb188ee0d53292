"""The decisions a run's page offers, and running them: each is the `crw flow`
command a user would type, run as a subprocess, so it writes the same rows by
construction.

What is offered follows the run's status (`crw.cli.read.status.run_status`): each
held call's answers as status lists them (`answer`), `pause` while a process runs
the run, `cancel` until it ended, `resume --detach` when it is paused or crashed,
or its last resume did not start. A request names one of those; anything else is
refused before a process is started.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trio

RUNNING = frozenset({"starting", "running", "waiting_session", "waiting_decision"})
"""The states a run can be paused in (a process runs it, or is coming up)."""
NOT_CANCELLED = frozenset({"ended", "corrupt", "unreadable"})
RESUMED = frozenset({"paused", "crashed"})
TIMEOUT = 300.0
"""Seconds a decision's command may take (pause and cancel wait 120 s at most)."""


@dataclass(frozen=True)
class Action:
    """One decision: `verb` (answer, pause, cancel, resume); an answer's `call`
    and `choice` (retry, skip, abort, restart)."""

    verb: str
    call: str = ""
    choice: str = ""

    @property
    def label(self) -> str:
        return f"{self.choice} {self.call}" if self.verb == "answer" else self.verb


@dataclass(frozen=True)
class Done:
    """A decision's command as it ran: its line, exit code and output."""

    command: str
    code: int
    stdout: str
    stderr: str


def offered(status: dict[str, Any], held: list[dict[str, Any]]) -> list[Action]:
    """The decisions the CLI offers a run in the state `status` (its `crw flow
    status --json` object) leaves it, `held` its held calls' entries."""
    state = status["state"]
    actions = [Action("answer", call["call"], choice) for call in held for choice in call["answer"]]
    if state in RUNNING and status["live"]:
        actions.append(Action("pause"))
    if state in RESUMED or (status.get("launch_failed") and state != "ended"):
        actions.append(Action("resume"))
    if state not in NOT_CANCELLED:
        actions.append(Action("cancel"))
    return actions


def argv(action: Action, run: str, state_dir: Path) -> list[str]:
    """The command line of `action` on `run`, as a user types it."""
    verb = ["crw", "flow", action.verb, run]
    if action.verb == "answer":
        verb += [action.call, f"--{action.choice}"]
    elif action.verb == "resume":
        verb.append("--detach")
    return [*verb, "--state", str(state_dir), "--json"]


async def run(command: list[str], cwd: Path) -> Done:
    """Run `command` (a `crw` command line) with this interpreter's crw: its exit
    code and output, whatever they are."""
    with trio.move_on_after(TIMEOUT):
        done = await trio.run_process(
            [sys.executable, "-m", "crw", *command[1:]],
            stdin=subprocess.DEVNULL,
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            cwd=cwd,
        )
        return Done(
            shlex.join(command),
            done.returncode,
            done.stdout.decode("utf-8", "replace"),
            done.stderr.decode("utf-8", "replace"),
        )
    return Done(shlex.join(command), -1, "", f"no answer within {TIMEOUT:g} s")
