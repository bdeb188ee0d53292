"""bench/resume.py at a tiny size: the figures it prints, and no process left behind."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.processes import processes_under

BENCH = Path(__file__).resolve().parents[2] / "bench" / "resume.py"


def test_prints_start_and_resume_figures_of_a_run_killed_at_its_midpoint(where: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH), "--json", "--calls", "40", "--tmp", str(where)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=90,
        check=True,
    )
    figures = json.loads(done.stdout)
    assert figures["calls"] == 40
    assert figures["rows_at_kill"] >= 2 * 20  # half the calls completed, rows and all
    assert figures["first_row"] == "started"
    assert figures["first_call_row"] != "started"
    assert figures["start_s"] > 0 and 0 < figures["first_row_s"] <= figures["first_call_row_s"]
    assert figures["start_run_s"] > 0
    assert processes_under(where) == []
