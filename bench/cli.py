"""Cold start of the read-only commands: `crw flow status RUN --json`.

Starts a run with `crw flow start` in a temporary state directory, waits for its
run process to stop, then times fresh `crw` processes end to end (interpreter
start, imports, reading run.json and the journal, replay, output). Prints a
table, or with --json one object {"status_cold_ms", "python_bare_ms"} (medians).

    .venv/bin/python bench/cli.py [--runs N] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CRW = [str(Path(sys.executable).parent / "crw")]


def timed(argv: list[str], runs: int) -> float:
    samples = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
        samples.append(time.perf_counter() - t0)
    return round(statistics.median(samples) * 1000, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as state:
        started = subprocess.run(
            [
                *CRW,
                "flow",
                "start",
                str(REPO / "examples" / "demo.toml"),
                "--owner",
                "bench",
                "--state",
                state,
                "--json",
            ],
            check=True,
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
        )
        run_dir = Path(json.loads(started.stdout)["run_dir"])
        while list(run_dir.glob("process.*.lock")):
            time.sleep(0.02)
        status = [*CRW, "flow", "status", run_dir.name, "--state", state, "--json"]
        figures = {
            "status_cold_ms": timed(status, args.runs),
            "python_bare_ms": timed([sys.executable, "-c", "pass"], args.runs),
        }
    if args.json:
        print(json.dumps(figures))
        return
    print(f"cold start, median of {args.runs} runs")
    print(f"  crw flow status --json  {figures['status_cold_ms']:7.1f} ms   (goal 150 ms)")
    print(f"  python -c pass          {figures['python_bare_ms']:7.1f} ms")


if __name__ == "__main__":
    main()
