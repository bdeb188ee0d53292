"""Every scale target, each against the figure its bench measures now, in one run.

The targets a big run is held to (docs/performance.md): the App Server backend's
throughput, flatness and memory at 10,000 calls, the session backend's throughput
at 1,000, a 10,000-node start and a resume from the midpoint of a 10,000-call
run, the journal's read and replay of 100,000 rows, and the owner's commands cold
on a finished 10,000-call run and a live one. Each bench runs as its own process,
in turn (nothing else of this one runs meanwhile), with `--json`; its figures are
read from that JSON, so a figure here is the figure the bench prints.

The shared machine's speed moves by a third within minutes (`bench/machine.py`):
the loop it times is taken before each bench and printed beside its targets, so a
target missed on a slow minute can be told from one the code misses. A bench
starts `--gap` seconds (90) after the one before, and no bench removes its files:
they all go under one directory (in `--tmp`), removed once the last bench has
run. On this machine's file system a removal of thousands of files slows the
creates near them for up to 360 s (docs/performance.md, "A quiet run"), so a
bench that removed its files would slow the benches after it.
About forty minutes in all on a quiet machine (the
100,000-call run alone some five).

Prints a table, or with --json one object: {"met": bool, "targets": [{"target",
"bench", "figure", "bound", "unit", "met", "margin"}], "benches": {NAME: {"argv",
"seconds", "machine", "figures" | "error"}}}. A target whose bench failed has
figure null and met false, and the bench's error says why; one still running
after BENCH_LIMIT (30 minutes) is interrupted as Ctrl-C interrupts it, so it reaps
the processes it started. Exit 0 when every target is met, 1 when one is not.

    .venv/bin/python bench/targets.py [--json] [--only BENCH,...] [--gap SECONDS] [--tmp DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import operator
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from keep import KEEP_ENV
from machine import speed

HERE = Path(__file__).resolve().parent
GAP = 90.0
"""Seconds between the end of a bench and the start of the next."""
BENCH_LIMIT = 1800.0
"""Seconds any one bench may take before it is stopped (and its targets unmet)."""
STOP_GRACE = 30.0
"""Seconds a bench stopped for its limit has to reap its processes and end."""


@dataclass(frozen=True)
class Target:
    """`figure <op> bound`, the figure at `path` in the JSON of `bench`."""

    name: str
    bench: str
    path: tuple[str, ...]
    op: str
    bound: float
    unit: str

    def judge(self, figures: Mapping[str, Any] | None) -> dict[str, Any]:
        """This target's line: its figure (None when the bench gave none), whether
        it is met, and its margin: how far the figure is on the met side of the
        bound, in percent of the bound (negative: on the other side; None
        without a figure, or for a bound of 0)."""
        figure: Any = figures
        for key in self.path:
            figure = figure.get(key) if isinstance(figure, Mapping) else None
        if isinstance(figure, bool) or not isinstance(figure, int | float):
            figure = None
        met = figure is not None and OPS[self.op](figure, self.bound)
        margin = None
        if figure is not None and self.bound:
            room = figure - self.bound if self.op == ">=" else self.bound - figure
            margin = round(100 * room / self.bound, 1)
        return {
            "target": self.name,
            "bench": self.bench,
            "figure": figure,
            "bound": f"{self.op} {self.bound:g}",
            "unit": self.unit,
            "met": met,
            "margin": margin,
        }


OPS: dict[str, Callable[[float, float], bool]] = {
    ">=": operator.ge,
    "<=": operator.le,
    "<": operator.lt,
}

BENCHES: dict[str, list[str]] = {
    "scale_app_server": ["scale.py", "--backend", "app-server", "--sizes", "100,10000"],
    "scale_session": ["scale.py", "--backend", "session", "--sizes", "1000"],
    "resume": ["resume.py", "--calls", "10000"],
    "replay": ["replay.py", "--trials", "5"],
    "cli": ["cli.py", "--runs", "20"],
    "big_start": ["big_start.py", "--sizes", "100000"],
    "session_syncs": ["session_syncs.py", "--sizes", "1000,10000"],
    "scale_100k": [
        "scale.py",
        "--backend",
        "app-server",
        "--sizes",
        "10000,100000",
        "--limit",
        "1500",
    ],
}
"""Each bench and its arguments (`--json` and `--tmp` are added where it takes them),
in the order they run. The last three are the second scale step's: a 100,000-node
workflow, a session call's rate, syncs and memory (session_syncs needs strace),
and 100,000 calls in one run. The 100,000-call bench runs last: its end removes
some 110,000 directories, and on this machine's file system the creates of the
next minutes skip past every inode freed there (up to 360 s while the inode
table is not written back, more than `--gap`): nine of ten 1,000-call session
runs started 70-90 s after the end of a 10,000-call one made 204-242 calls/s
(docs/performance.md, "The session call and this machine's file system")."""
TAKES_TMP = {"scale.py", "resume.py", "big_start.py", "session_syncs.py"}

TARGETS = (
    Target(
        "App Server calls/s at 10,000 calls",
        "scale_app_server",
        ("app_server", "10000", "calls_per_s"),
        ">=",
        250,
        "calls/s",
    ),
    Target(
        "App Server flat_ratio at 10,000 calls",
        "scale_app_server",
        ("app_server", "10000", "flat_ratio"),
        "<=",
        1.3,
        "",
    ),
    Target(
        "App Server run's peak RSS at 10,000 calls",
        "scale_app_server",
        ("app_server", "10000", "run_rss_mb"),
        "<=",
        250,
        "MB",
    ),
    Target(
        "session calls/s at 1,000 calls",
        "scale_session",
        ("session", "1000", "calls_per_s"),
        ">=",
        100,
        "calls/s",
    ),
    Target(
        "a 10,000-node workflow starts (to its first prepared row)",
        "resume",
        ("start_s",),
        "<",
        2,
        "s",
    ),
    Target(
        "a 10,000-call run killed at its midpoint resumes (to the row after started)",
        "resume",
        ("first_call_row_s",),
        "<",
        2,
        "s",
    ),
    Target("read + replay of 100,000 rows", "replay", ("total_ms",), "<=", 500, "ms"),
    Target("next --json, finished 10,000-call run", "cli", ("next_finished_ms",), "<=", 150, "ms"),
    Target(
        "status --json, finished 10,000-call run", "cli", ("status_finished_ms",), "<=", 300, "ms"
    ),
    Target("next --json, live demo run", "cli", ("next_live_ms",), "<=", 100, "ms"),
    Target(
        "a 100,000-node workflow loads and starts (to its first prepared row)",
        "big_start",
        ("100000", "start_s"),
        "<",
        5,
        "s",
    ),
    Target(
        "App Server calls/s at 100,000 calls",
        "scale_100k",
        ("app_server", "100000", "calls_per_s"),
        ">=",
        600,
        "calls/s",
    ),
    Target(
        "App Server per-call cost, 100,000 against 10,000 calls",
        "scale_100k",
        ("app_server", "100000", "flat_ratio"),
        "<=",
        1.2,
        "",
    ),
    Target(
        "App Server run's peak RSS at 100,000 calls",
        "scale_100k",
        ("app_server", "100000", "run_rss_mb"),
        "<=",
        250,
        "MB",
    ),
    Target(
        "session calls/s at 1,000 calls (second step)",
        "session_syncs",
        ("1000", "calls_per_s"),
        ">=",
        300,
        "calls/s",
    ),
    Target(
        "session calls/s at 10,000 calls",
        "session_syncs",
        ("10000", "calls_per_s"),
        ">=",
        300,
        "calls/s",
    ),
    Target(
        "session syncs a call (strace, 1,000 calls)",
        "session_syncs",
        ("1000", "syncs_per_call"),
        "<=",
        1.5,
        "",
    ),
    Target(
        "session run's peak RSS at 10,000 calls",
        "session_syncs",
        ("10000", "run_rss_mb"),
        "<=",
        150,
        "MB",
    ),
)


def run_bench(name: str, tmp: Path) -> dict[str, Any]:
    """Run one bench with --json: its argv, wall seconds, the machine's speed just
    before, and its figures or the error it ended with. Its state directories and
    temporary files go under `tmp` (`--tmp`, and TMPDIR for those it makes on its
    own), and it leaves them there (`keep.KEEP_ENV`): `main` removes them once
    every bench has run."""
    script, *args = BENCHES[name]
    argv = [sys.executable, str(HERE / script), "--json", *args]
    if script in TAKES_TMP:
        argv += ["--tmp", str(tmp)]
    record: dict[str, Any] = {"argv": argv[1:], "machine": speed()}
    began = time.monotonic()
    with subprocess.Popen(
        argv,
        cwd=HERE.parent,
        env=os.environ | {KEEP_ENV: "1", "TMPDIR": str(tmp)},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as bench:
        try:
            out, err = bench.communicate(timeout=BENCH_LIMIT)
        except subprocess.TimeoutExpired:
            _stop(bench, tmp)
            record["error"] = f"did not finish in {BENCH_LIMIT:g} s"
        else:
            record |= _figures(bench.returncode, out, err)
    record["seconds"] = round(time.monotonic() - began, 1)
    return record


def _stop(bench: subprocess.Popen[str], tmp: Path) -> None:
    """Interrupt a bench that ran too long, as Ctrl-C would: it reaps the run and
    host processes it started on its way out (a SIGKILL would leave them). Killed
    if it has not ended after STOP_GRACE seconds (a loaded machine), and then every
    process it left whose command line names `tmp` with it."""
    bench.send_signal(signal.SIGINT)
    try:
        bench.communicate(timeout=STOP_GRACE)
    except subprocess.TimeoutExpired:
        bench.kill()
        bench.communicate()
        for pid in _left_under(tmp):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def _left_under(where: Path) -> list[int]:
    """The pids of the processes whose command line names `where`, this one left out."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            with contextlib.suppress(OSError):
                if str(where).encode() in (entry / "cmdline").read_bytes():
                    pids.append(int(entry.name))
    return pids


def _figures(code: int, out: str, err: str) -> dict[str, Any]:
    """{"figures": the JSON object of the bench's last line}, or {"error": why not}."""
    last = out.strip().splitlines()[-1:] or [""]
    if code != 0:
        tail = err.strip().splitlines()[-1:] or ["no output on stderr"]
        return {"error": f"exit {code}: {tail[0]}"}
    try:
        figures = json.loads(last[0])
    except ValueError:
        return {"error": f"its last line is not JSON: {last[0][:200]!r}"}
    if not isinstance(figures, dict):
        return {"error": "its JSON is not an object"}
    return {"figures": figures}


def judge(benches: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Every target of the benches that ran, against its figure."""
    return [
        target.judge(benches[target.bench].get("figures"))
        for target in TARGETS
        if target.bench in benches
    ]


def table(report: Mapping[str, Any]) -> str:
    """The report as a terminal table (rich), a bench's error under it."""
    from rich.console import Console
    from rich.table import Table

    grid = Table(title="scale targets", title_justify="left")
    for column, justify in [
        ("target", "left"),
        ("figure", "right"),
        ("bound", "right"),
        ("", "left"),
        ("margin", "right"),
        ("machine loop", "right"),
    ]:
        grid.add_column(column, justify=justify)  # type: ignore[arg-type]
    for line in report["targets"]:
        bench = report["benches"][line["bench"]]
        figure = "-" if line["figure"] is None else f"{line['figure']:g} {line['unit']}".strip()
        grid.add_row(
            line["target"],
            figure,
            f"{line['bound']} {line['unit']}".strip(),
            "met" if line["met"] else "NOT MET",
            "-" if line["margin"] is None else f"{line['margin']:+.1f} %",
            f"{bench['machine']['loop_ms']:g} ms",
        )
    console = Console(width=120)
    with console.capture() as captured:
        console.print(grid)
    errors = [f"{name}: {b['error']}" for name, b in report["benches"].items() if "error" in b]
    notes = [
        "machine loop: bench/machine.py just before the bench (lower is faster)",
        *errors,
    ]
    return captured.get().rstrip() + "\n" + "\n".join(notes)


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--only", help=f"a comma-separated subset of the benches: {','.join(BENCHES)}"
    )
    parser.add_argument("--gap", type=float, default=GAP, help="seconds between two benches")
    parser.add_argument("--tmp", type=Path, default=Path(tempfile.gettempdir()))
    args = parser.parse_args()
    if not args.gap >= 0:
        parser.error(f"--gap {args.gap:g}: pass the seconds between two benches, 0 or more")
    names = list(BENCHES) if args.only is None else args.only.split(",")
    unknown = [name for name in names if name not in BENCHES]
    if unknown:
        parser.error(
            f"--only {args.only}: no bench {unknown[0]!r}; pass some of {','.join(BENCHES)}"
        )
    benches: dict[str, dict[str, Any]] = {}
    root = Path(tempfile.mkdtemp(prefix="crw-targets-", dir=args.tmp))
    try:
        for name in names:
            if benches:
                time.sleep(args.gap)
            benches[name] = run_bench(name, root)
    finally:  # every bench's files at once, after the last bench: none measures a removal
        shutil.rmtree(root, ignore_errors=True)
    targets = judge(benches)
    report = {"met": all(t["met"] for t in targets), "targets": targets, "benches": benches}
    print(json.dumps(report) if args.json else table(report))
    return 0 if report["met"] else 1


if __name__ == "__main__":
    sys.exit(main())
