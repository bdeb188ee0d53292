"""Everything a run makes under the state directory is the user's alone whatever
the umask, and a start names a state directory others may write.

The demo runs as a user runs it (a real `crw` process) under umask 000, the
loosest there is: the state directory, the run's directories and files, the
locks, the flow-bound directory, and the simulated host's codex home and log
(the demo keeps them in its state directory) must come out 0700 and 0600.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

from tests.cli.conftest import Crw
from tests.cli.test_start import WORKFLOW

SYMLINK_ALLOWED = {"steps/.live"}
"""The one entry that is neither: the step bus's `steps/.live`, a symbolic link
(the live run's marker, `crw.bus.live`). A link has no mode of its own on Linux
(it reads 0777 and is never used for its permissions); what it points at is a
name, not a file."""


def _demo_under_umask_000(crw: Crw) -> dict[str, object]:
    """`crw flow demo --json` with umask 000; its host and run process reaped at teardown."""
    done = subprocess.run(
        [sys.executable, "-m", "crw", "flow", "demo", "--state", str(crw.state), "--json"],
        env=crw.env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=crw.state.parent,
        umask=0,
    )
    result = json.loads(done.stdout) if done.stdout.startswith("{") else {}
    crw.pids += [pid for pid in (result.get("pid"), result.get("host_pid")) if isinstance(pid, int)]
    assert done.returncode == 0, done.stderr
    assert isinstance(result, dict)
    return result


def _modes(root: Path) -> dict[str, tuple[str, int]]:
    """Every entry under `root` and `root` itself: its kind and permission bits."""
    found = {".": ("dir", stat.S_IMODE(os.lstat(root).st_mode))}
    for directory, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(directory) / name
            st = os.lstat(path)
            kind = (
                "link"
                if stat.S_ISLNK(st.st_mode)
                else "dir"
                if stat.S_ISDIR(st.st_mode)
                else "file"
            )
            found[str(path.relative_to(root))] = (kind, stat.S_IMODE(st.st_mode))
    return found


def test_a_run_under_umask_000_leaves_only_0700_directories_and_0600_files(crw: Crw) -> None:
    """The state directory and its flow/, made by the run, are 0700 (they were
    0777); run.lock and flow-bound/flow-bound.lock are 0600 (they were 0666)."""
    out = _demo_under_umask_000(crw)
    assert out["ended_status"] == "completed"
    run_dir = Path(str(out["run_dir"]))
    found = _modes(crw.state)
    run = str(run_dir.relative_to(crw.state))
    for must in (".", "flow", run, f"{run}/run.lock", f"{run}/journal.jsonl", "flow-bound"):
        assert must in found, must
    assert "flow-bound/flow-bound.lock" in found and "codex-home" in found
    loose = {
        name: f"{kind} {bits:o}"
        for name, (kind, bits) in found.items()
        if (kind, bits) not in (("dir", 0o700), ("file", 0o600))
    }
    assert loose == {f"{run}/{link}": "link 777" for link in SYMLINK_ALLOWED}


def test_a_start_in_a_state_directory_others_may_write_warns_naming_it(crw: Crw) -> None:
    """The start warns, naming the directory and the chmod that fixes it, and
    starts the run all the same; it leaves the directory's mode to the user."""
    (crw.state / "flow").mkdir(parents=True)
    (crw.state / "flow").chmod(0o755)
    crw.state.chmod(0o777)
    result = crw.start(WORKFLOW, "--owner", "owner-1")
    assert result.code == 0, result.stderr
    warnings = result.json()["warnings"]
    assert [w for w in warnings if "writable by group or others" in w] == [
        f"the state directory {crw.state} is writable by group or others (mode 777): "
        "another user could remove or replace what crw keeps there; make it private "
        f"with: chmod 700 {crw.state}"
    ]
    assert stat.S_IMODE(crw.state.stat().st_mode) == 0o777
    assert stat.S_IMODE((crw.state / "flow").stat().st_mode) == 0o755


def test_a_start_in_a_private_state_directory_does_not_warn_of_it(crw: Crw) -> None:
    result = crw.start(WORKFLOW, "--owner", "owner-1")
    assert result.code == 0, result.stderr
    assert not [w for w in result.json()["warnings"] if "writable by group or others" in w]
    assert stat.S_IMODE(crw.state.stat().st_mode) == 0o700
