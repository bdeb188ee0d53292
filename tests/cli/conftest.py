"""Running `crw` as a user does: a real process, its exit code and its output.

Every run process a test starts is reaped at teardown by pid, and no child
inherits the test's stdout, so CI never hangs on a leftover process.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from crw.cli.output import one_line
from crw.detach import Detached
from tests import zygote
from tests.deadlines import LOADED
from tests.processes import reap_naming

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "crw" / "examples"


@dataclass
class Result:
    code: int
    stdout: str
    stderr: str

    def json(self) -> dict[str, Any]:
        value = json.loads(self.stdout)
        assert isinstance(value, dict)
        return value

    def error(self) -> str:
        """The error as a person sees it on stderr (`crw: error: LINE`); of a --json
        command, its `{"error", "fix"}` object on stdout joined back into that line
        (and then stderr is empty)."""
        if self.stderr or not self.stdout.startswith('{"error": '):
            return self.stderr
        assert self.stderr == ""
        error = self.json()
        fix = f"; {error['fix']}" if error["fix"] is not None else ""
        return f"crw: error: {one_line(error['error'] + fix)}\n"


class Crw:
    """Runs `python -m crw …` with a private state directory and environment
    (each command a process forked from a server that imported crw once:
    tests/zygote.py)."""

    def __init__(self, state: Path, tmpdir: Path) -> None:
        self.state = state
        self.pids: list[int] = []
        self.env = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith(("CRW_", "CODEX_"))
        }
        self.env |= {"TMPDIR": str(tmpdir), "CODEX_HOME": str(state / "codex-home")}

    def __call__(
        self, *args: str, env: dict[str, str] | None = None, timeout: float = 60
    ) -> Result:
        env = self.env if env is None else env
        done = zygote.run(list(args), env, self.state.parent, timeout)
        result = Result(done.returncode, done.stdout, done.stderr)
        if done.returncode == 0 and '"pid"' in done.stdout:
            pid = result.json().get("pid")
            if isinstance(pid, int):
                self.pids.append(pid)
        return result

    def start(self, *args: str, env: dict[str, str] | None = None) -> Result:
        return self("flow", "start", *args, "--state", str(self.state), "--json", env=env)

    def reap(self) -> None:
        """Kill the processes the commands started: those whose pid a command
        printed, and every other whose command line or environment names the state
        directory (a run process a start without --json launched, one that stays to
        wait for its host after a host_unavailable pause), again until none is left."""
        for pid in self.pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        reap_naming(self.state)


@pytest.fixture
def crw(tmp_path: Path) -> Iterator[Crw]:
    state = tmp_path / "state"
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    runner = Crw(state, tmpdir)
    yield runner
    runner.reap()


def waiting_for_no_host(root: Path) -> Path:
    """examples/fix-issue.toml written into `root` with `host_wait = 0`: a run of it
    paused host_unavailable does not wait for its host (its process exits)."""
    text = (EXAMPLES / "fix-issue.toml").read_text().replace("schemas/", f"{EXAMPLES}/schemas/")
    path = root / "fix-issue.toml"
    path.write_text(text + "\n[settings]\nhost_wait = 0\n")
    return path


def wait_for_exit(run_dir: Path, timeout: float = LOADED) -> None:
    """The foundation's run process stops after its started row: wait until it has
    removed its process lock file (it does so last, after the run lock)."""
    deadline = time.monotonic() + timeout
    while list(run_dir.glob("process.*.lock")) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not list(run_dir.glob("process.*.lock")), f"run process of {run_dir} still running"


PROBE = """
import json, sys
from crw.cli import main
sys.argv = ["crw", *sys.argv[1:]]
try:
    main()
except SystemExit as done:
    code = done.code
sys.stdout.flush()
json.dump({"code": code, "modules": sorted(sys.modules)}, sys.stderr)
"""
"""Runs `crw` in a fresh interpreter and reports, on stderr, the exit code and
every module the command imported."""


def imported(crw: Crw, *args: str, cwd: Path | None = None) -> tuple[Result, list[str]]:
    """`crw *args` run cold in a fresh interpreter (in `cwd`, when given): its
    result, with the exit code the command gave, and every module it imported."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *args],
        env=crw.env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
    )
    report = json.loads(done.stderr.splitlines()[-1])
    return Result(report["code"], done.stdout, done.stderr), report["modules"]


def start_in_process(
    crw: Crw,
    monkeypatch: pytest.MonkeyPatch,
    owner: str,
    on_launch: Callable[[Any], None] = lambda run: None,
    host: str | None = None,
) -> Any:
    """`start_run` of WORKFLOW's session run (on `host`, when given) in this
    process: `on_launch(run_dir)`
    sees the run just before its process is launched; the process is waited for
    and reaped by pid, whatever happened. Returns the start's outcome."""
    from crw.cli.run import start as start_module
    from crw.engine.run.launch import launch_run_process
    from tests.cli.test_next import WORKFLOW

    children: list[Detached] = []

    def launch(run: Any, *args: Any) -> Detached:
        on_launch(run)
        children.append(launch_run_process(run, *args))
        return children[-1]

    monkeypatch.setattr(start_module, "launch_run_process", launch)
    outcome = start_module.start_run(
        WORKFLOW,
        backend="session",
        owner=owner,
        host=host,
        state=str(crw.state),
        environ=dict(crw.env),
    )
    try:
        wait_for_exit(outcome.run.root)
    finally:
        for child in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child.pid, signal.SIGKILL)
            child.wait(timeout=10)
    return outcome


def unfolded(lines: list[str], at: int) -> str:
    """The line `lines[at]` of a human form with the lines it was folded into
    (each indented two more than it) joined back, one space between."""
    indent = len(lines[at]) - len(lines[at].lstrip()) + 2
    parts = [lines[at]]
    for line in lines[at + 1 :]:
        if not line.startswith(" " * indent) or line[indent] == " ":
            break
        parts.append(line.strip())
    return " ".join(parts)
