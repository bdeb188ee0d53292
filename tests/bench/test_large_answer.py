"""bench/large_answer.py at a tiny size: the figures it prints, and no process left behind."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.processes import processes_under

BENCH = Path(__file__).resolve().parents[2] / "bench" / "large_answer.py"


@pytest.mark.parametrize(("rows", "low", "high"), [("now", 0.7, 1.0), ("before-fold", 1.0, 1.6)])
def test_prints_the_peak_memory_of_each_read_command(
    where: Path, rows: str, low: float, high: float
) -> None:
    argv = [sys.executable, str(BENCH), "--json", "--mb", "0.2", "--calls", "2"]
    done = subprocess.run(
        [*argv, "--tmp", str(where), "--rows", rows],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    figures = json.loads(done.stdout)
    assert figures["calls"] == 2 and figures["rows"] == rows
    # Two answers of 0.2 MB a call: the journal holds each once now; a repair row
    # before the fold held its answer twice.
    assert low < figures["journal_mib"] < high
    for name in ("status_json", "show", "show_json", "status_results_json"):
        assert figures[name]["exit"] == 0 and figures[name]["rss_mib"] > 10
    assert processes_under(where) == []
