"""The run process (`crw flow _run`) starts cold on every start and resume, and
nothing runs before its first row: a session run in plain directories imports
neither the command tree, nor git, nor the App Server backend's modules, nor the
`regex` of a schema's patterns. Each is imported where it is used: git by a run
with a repository, the App Server modules by an App Server run, `regex` by the
first pattern an answer is matched against."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from crw.engine.rundir import RunDir
from crw.journal.log import read_journal
from tests.cli.conftest import EXAMPLES, Crw, wait_for_exit

NOT_NEEDED = (
    "cyclopts",
    "pygit2",
    "crw.workspace.commit",
    "crw.workspace.proof",
    "crw.workspace.refs",
    "crw.workspace.trace",
    "crw.workspace.worktrees",
    "crw.actors.app_server",
    "crw.engine.app_held",
    "crw.engine.app_resume",
    "regex",
)
"""What a session run in plain directories needs none of, up to its host: the
command tree, git, the App Server backend, the pattern matcher."""

PROBE = """
import json, sys
from crw.cli import main
sys.argv = ["crw", *sys.argv[1:]]
try:
    main()
except SystemExit as done:
    code = done.code
json.dump({"code": code, "modules": sorted(sys.modules)}, sys.stderr)
"""
"""Runs `crw` in a fresh interpreter and reports, on stderr, the exit code and
every module the command imported."""


def test_a_session_run_in_plain_directories_imports_neither_git_nor_the_app_server(
    crw: Crw,
) -> None:
    """The run process of a session run without a repository, from its start to its
    host (none here: it pauses host_unavailable), imports none of NOT_NEEDED."""
    out = crw.start(str(EXAMPLES / "fix-issue.toml"), "--owner", "o").json()
    run = RunDir(Path(out["run_dir"]))
    wait_for_exit(run.root)
    done = subprocess.run(
        [sys.executable, "-c", PROBE, "flow", "_run", run.id, "--state", str(crw.state)],
        env=crw.env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=crw.state.parent,
    )
    report = json.loads(done.stderr.splitlines()[-1])
    rows = [row["row"] for row in read_journal(run.journal).rows]
    assert report["code"] == 0, done.stderr
    assert rows[-2:] == ["started", "paused"] and rows.count("started") == 2
    assert [m for m in report["modules"] if m.startswith(NOT_NEEDED)] == []
