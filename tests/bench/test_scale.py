"""bench/scale.py at a tiny size: the figures it prints, and no process left behind."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.bench.conftest import processes_under

BENCH = Path(__file__).resolve().parents[2] / "bench" / "scale.py"
FIGURES = {
    "wall_s",
    "calls_per_s",
    "per_call_ms",
    "rows",
    "run_rss_mb",
    "host_requests_per_call",
    "journal_bytes_per_call",
    "flat_ratio",
}


def bench(where: Path, *args: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, str(BENCH), "--json", "--tmp", str(where), *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    result = json.loads(done.stdout)
    assert isinstance(result, dict)
    return result


def test_prints_every_figure_per_backend_and_size_and_reaps_its_processes(where: Path) -> None:
    result = bench(where, "--sizes", "2,3")
    assert set(result) == {"app_server", "session"}
    for sizes in result.values():
        assert set(sizes) == {"2", "3"}
        for size, figures in sizes.items():
            assert set(figures) == FIGURES
            assert figures["rows"] >= 2 * int(size) and figures["run_rss_mb"] > 0
            assert figures["host_requests_per_call"] > 0
        assert sizes["2"]["flat_ratio"] == 1.0
    assert processes_under(where) == []


def test_a_size_past_its_limit_is_skipped_and_its_processes_reaped(where: Path) -> None:
    result = bench(where, "--sizes", "300,400", "--backend", "app-server", "--limit", "0.2")
    skipped = result["app_server"]
    assert re.fullmatch(
        r"did not end within 0\.2 s \(\d+ of 300 calls completed\)", skipped["300"]["skipped"]
    )
    assert skipped["400"] == {"skipped": "a smaller size did not end in time"}
    assert processes_under(where) == []
