"""The run process (`crw flow _run`) starts cold on every start and resume, and
nothing runs before its first row: a session run in plain directories imports
neither the command tree, nor git, nor the App Server backend's modules, nor the
`regex` of a schema's patterns, and an App Server run none of the session
backend's. Each is imported where it is used: git by a run with a repository,
each backend's modules by its runs, `regex` by the first pattern an answer is
matched against."""

from __future__ import annotations

import gc
import json
import subprocess
import sys
from pathlib import Path

from crw.cli.hot import hot_command
from crw.engine.run.rundir import RunDir
from crw.journal.log import read_journal
from tests.cli.conftest import Crw, imported, wait_for_exit, waiting_for_no_host

NOT_NEEDED = (
    "cyclopts",
    "pygit2",
    "crw.workspace.commit",
    "crw.workspace.proof",
    "crw.workspace.refs",
    "crw.workspace.trace",
    "crw.workspace.worktrees",
    "crw.actors.app_server",
    "crw.engine.holds.app_held",
    "crw.engine.holds.app_resume",
    "regex",
    "urllib.request",
    "http.client",
    "wsproto",
    "h11",
    "crw.host.websocket",
    "crw.host.client",
)
"""What a session run in plain directories needs none of, up to its host: the
command tree, git, the App Server backend, the pattern matcher, the URL opener
(a schema that names no file has no path to take from a file URL), and, while
its host is not there, the WebSocket framing and the host client (`crw.host.connect`
imports them once a socket is open; the actors name the client for types only)."""

NOT_NEEDED_APP_SERVER = (
    "cyclopts",
    "wsproto",
    "crw.actors.session_",
    "crw.actors.inbox",
    "crw.actors.wake",
    "crw.actors.review_rounds",
)
"""What an App Server run needs none of: the session backend's actors, and the
WebSocket framing while its host is not there."""


BEFORE_STARTED = (
    "wsproto",
    "h11",
    "crw.host.transport",
    "crw.host.websocket",
    "crw.host.client",
    "crw.host.rpc",
    "crw.host.protocol",
    "crw.actors.host_reader",
    "crw.actors.thread_watches",
    "crw.engine.steps.bind",
    "crw.engine.holds.interrupt",
    "crw.actors.control",
    "crw.engine.steps.replies",
)
"""What the run process's module (all it imports before its started row) leaves to
its first connection to the host: the WebSocket framing, the client and its
protocol, the host reader, the bind's and the interrupt's rules, the run control
and the call records of a backend."""


def imported_by(module: str) -> list[str]:
    """The modules a fresh interpreter holds once it imported `module`."""
    code = f"import json, sys, {module}; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    modules: list[str] = json.loads(out.stdout)
    return modules


def run_again(crw: Crw, *args: str) -> list[str]:
    """Start a run of fix-issue.toml with `args` (it pauses host_unavailable: no
    host), then run its process again in a fresh interpreter, which pauses again;
    every module that process imported."""
    out = crw.start(str(waiting_for_no_host(crw.state.parent)), *args).json()
    run = RunDir(Path(out["run_dir"]))
    wait_for_exit(run.root)
    again = ("flow", "_run", run.id, "--state", str(crw.state))
    result, modules = imported(crw, *again, cwd=crw.state.parent)
    rows = [row["row"] for row in read_journal(run.journal).rows]
    assert result.code == 0, result.stderr
    assert rows[-2:] == ["started", "paused"] and rows.count("started") == 2
    return modules


def test_a_session_run_in_plain_directories_imports_neither_git_nor_the_app_server(
    crw: Crw,
) -> None:
    """The run process of a session run without a repository, from its start to its
    host (none here), imports none of NOT_NEEDED."""
    modules = run_again(crw, "--owner", "o")
    assert [m for m in modules if m.startswith(NOT_NEEDED)] == []


def test_an_app_server_run_imports_none_of_the_session_backend(crw: Crw) -> None:
    """The run process of an App Server run, up to its host (none here), imports
    none of NOT_NEEDED_APP_SERVER."""
    modules = run_again(crw, "--backend", "app-server", "--host", "unix:nowhere.sock")
    assert [m for m in modules if m.startswith(NOT_NEEDED_APP_SERVER)] == []


COLLECTIONS = """
import gc, json, sys
from crw.cli.owner import hook
from crw.cli import hot, main
before = [generation["collections"] for generation in gc.get_stats()]
sys.argv = ["crw", *sys.argv[1:]]
try:
    main()
except SystemExit as done:
    code = done.code
after = [generation["collections"] for generation in gc.get_stats()]
json.dump({"code": code, "collections": [b - a for a, b in zip(before, after)]}, sys.stderr)
"""
"""Runs `crw` in a fresh interpreter and reports, on stderr, the exit code and the
collections of each generation its process made once it read its command line
(the modules that read it, `crw.cli.owner.hook` and `crw.cli.hot`, imported before)."""


def test_the_run_process_starts_up_without_a_collection(crw: Crw) -> None:
    """The run process of a session run, from its start to its host (none here: it
    pauses), makes no collection: its imports, the workflow and the journal it
    reads live as long as the process (the collector runs once the calls do)."""
    out = crw.start(str(waiting_for_no_host(crw.state.parent)), "--owner", "o").json()
    run = RunDir(Path(out["run_dir"]))
    wait_for_exit(run.root)
    done = subprocess.run(
        [sys.executable, "-c", COLLECTIONS, "flow", "_run", run.id, "--state", str(crw.state)],
        env=crw.env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=crw.state.parent,
    )
    report = json.loads(done.stderr.splitlines()[-1])
    assert report["code"] == 0, done.stderr
    assert [row["row"] for row in read_journal(run.journal).rows][-2:] == ["started", "paused"]
    assert report["collections"] == [0, 0, 0]


def test_the_run_process_turns_the_collector_off_before_its_imports() -> None:
    """The hot path turns the collector off for the run process too: its start-up
    lets it run again once the calls run (`crw.actors.run.run_command`)."""
    gc.enable()  # as a fresh process has it
    try:
        assert hot_command(["flow", "_run", "r", "--state", "s"]) is not None
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_the_run_process_imports_the_host_client_when_it_connects() -> None:
    """`crw.actors.run` (the run process's whole import, before its started row)
    imports none of BEFORE_STARTED: the host's errors come from `crw.host.errors`,
    `crw.host.connect` imports the client and the transport when it opens a
    connection, the run its host reader then and its backend the run control and
    the call records, after the started row, which `crw flow start` waits for;
    the review rules and the run control name the held reasons alone."""
    assert [m for m in imported_by("crw.actors.run") if m.startswith(BEFORE_STARTED)] == []
