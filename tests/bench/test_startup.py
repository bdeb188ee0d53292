"""bench/startup.py on two commands: the figures it prints, and no process left behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.processes import processes_under

BENCH = Path(__file__).resolve().parents[2] / "bench" / "startup.py"


def test_prints_each_commands_cpu_modules_and_heaviest_chains(where: Path) -> None:
    """A start (its run process waited for) and a queued dispatch report, each timed
    once: the CPU of the process, its modules, the chains of its heavy packages."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CRW_", "CODEX_"))}
    only = "flow start,flow dispatched"
    done = subprocess.run(
        [sys.executable, str(BENCH), "--runs", "1", "--only", only, "--json"],
        env=env | {"TMPDIR": str(where)},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=240,
        check=True,
        cwd=where,
    )
    figures = json.loads(done.stdout)
    assert sorted(figures) == ["crw", "load"] and len(figures["load"]) == 6
    start, dispatched = figures["crw"]["flow start"], figures["crw"]["flow dispatched"]
    assert start["exit"] == [0] and dispatched["exit"] == [1]  # queued exits 1
    for command in (start, dispatched):
        assert command["cpu_ms"] > 0 and command["modules"] > 100
    assert any("jsonschema" in chain for chain in start["chains"])
    assert not any("cyclopts" in chain or "jsonschema" in chain for chain in dispatched["chains"])
    assert processes_under(where) == []
