"""bench/resume.py at a tiny size: the figures it prints, and no process left behind."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from crw.engine.run.locks import run_is_live
from crw.engine.run.rundir import RunDir
from tests.bench.conftest import load_bench
from tests.processes import processes_under

BENCH = Path(__file__).resolve().parents[2] / "bench" / "resume.py"
LIMIT = "60"
"""The bench's own wait for each row: a row that never comes fails with the bench's
line. The test's timeout, a hang guard over the bench's five waits, is longer; a
starved bench (two CPU hogs beside a niced suite) took over 90 s."""


def test_prints_start_and_resume_figures_of_a_run_killed_at_its_midpoint(where: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH), "--json", "--calls", "40", "--limit", LIMIT, "--tmp", where],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=280,  # under pytest-timeout's 300 s
    )
    assert done.returncode == 0, done.stderr
    figures = json.loads(done.stdout)
    assert figures["calls"] == 40
    assert figures["rows_at_kill"] >= 2 * 20  # half the calls completed, rows and all
    assert figures["first_row"] == "started"
    assert figures["first_call_row"] != "started"
    assert figures["start_s"] > 0 and 0 < figures["first_row_s"] <= figures["first_call_row_s"]
    assert figures["start_run_s"] > 0
    assert processes_under(where) == []


# The bench's start leaves its detached child running: Popen warns when it is collected.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_the_run_is_killed_at_its_midpoint_however_late_the_bench_looks(
    where: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bench sees no row while the run's first process lives (a loaded machine
    left it no CPU until then): that process is still killed at the run's midpoint,
    not after its end, and the resume is timed. The bench killed it once it had
    seen half the calls completed, so a run that ran to its end first left nothing
    to resume, and the bench waited for a row that never came."""
    resume = load_bench("resume", monkeypatch)
    rows = resume.Tail.rows
    phase = "before"  # the first process not yet live, then "live", then "after"

    def late(tail: Any) -> list[dict[str, Any]]:
        nonlocal phase
        if phase != "after":
            if run_is_live(RunDir(tail.journal.parent)):
                phase = "live"
                return []
            if phase == "live":
                phase = "after"
        found: list[dict[str, Any]] = rows(tail)
        return found

    monkeypatch.setattr(resume.Tail, "rows", late)
    figures = resume.bench(16, 20.0, where)
    assert phase == "after"
    assert figures["first_row"] == "started" and figures["first_call_row"] != "started"
    assert figures["rows_at_kill"] >= 2 * 8
    assert processes_under(where) == []
