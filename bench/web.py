"""How fast `crw flow ui` answers on a finished run of many calls.

A finished app-server run of --calls (10,000) instant calls is made as
`bench/cli.py` makes it (`finished_run`: `crw host sim serve`, the detached run
process waited for), then `crw flow ui --port 0 --json` serves its state and
each page is fetched --runs times over HTTP; the figures are medians in ms:

- `run_page`: the run's page (status through the replay snapshot, the first
  page of 100 calls, the last page of rows) [target < 1000 ms];
- `run_page_last_calls`: the run's last page of calls;
- `rows_page`: the run's page with its oldest rows (`?before=` a small offset);
- `runs_list`: the runs list;
- `run_part`: the fragment the page fetches again when the run's state changes;
- `call_page`: the page of one call in the middle (`crw flow call`'s view: the
  replay snapshot, then the call's own rows found by a byte search);
- `timeline`: the timeline SVG, asked for on its own (the first: the journal
  folded whole, its fold then kept in `timeline.snapshot`; then the picture
  kept while the journal is unchanged);
- `timeline_cli`: `crw flow timeline RUN --out FILE.svg`, a process each (the
  fold's snapshot and the rows after it);
- `first_event`: from opening the run's event stream to its first event;
- with `--listed N` (50), N-1 more finished runs beside it (copies of a
  100-call run under other ids): `runs_list_listed` the runs list of all N, and
  `runs_event_listed`, from a new run's directory made to the runs list's
  stream's event (the list then fetched again: `runs_refetch_listed`).

With `--live`, the run is not waited for before the view serves it: N-1 copies
of a 100-call run are listed beside it (--listed), and while it runs
(`bench/web_live.py`) one client follows its event stream and one the runs
list's, and the runs page and the run's page are fetched in turn:
`live_run_event_ms` and `live_runs_event_ms` (a row's append to the event that
brings it reaching the client, median and p95), `live_runs_page_ms` and
`live_run_page_ms` (median and p95); then the pages above are fetched on the run
it finished as, 50 runs listed.

The view and the run are reaped by pid.

    .venv/bin/python bench/web.py [--calls N] [--runs N] [--listed N] [--live] [--json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from cli import environ, finished_run  # noqa: E402
from web_live import live_figures, running_run  # noqa: E402

TARGET_MS = 1000


def fetch_ms(url: str, *, event: bool = False) -> float:
    """Milliseconds to read `url` whole (or, `event`, to its first event)."""
    began = time.perf_counter()
    with urllib.request.urlopen(url, timeout=300) as answer:
        if event:
            while not answer.readline().startswith(b"data:"):
                pass
        else:
            answer.read()
    return (time.perf_counter() - began) * 1000


def timeline_cli_ms(state: Path, run: str, tmp: Path, runs: int) -> float:
    """The median wall time of `crw flow timeline RUN --out FILE.svg`, a process
    each (its fold from the snapshot the view's first picture left)."""
    times = []
    for _ in range(runs):
        began = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "crw", "flow", "timeline", run, "--out", str(tmp / "t.svg"),
             "--state", str(state)],
            check=True, stdout=subprocess.DEVNULL, env=environ(state), cwd=REPO,
        )  # fmt: skip
        times.append((time.perf_counter() - began) * 1000)
    return round(statistics.median(times), 1)


def listed_figures(state: Path, tmp: Path, origin: str, listed: int, runs: int) -> dict[str, float]:
    """The runs list with `listed` runs: its fetch, and a new run's event."""
    small_state = tmp / "small"
    small = finished_run(small_state, 100)
    flow = state / "flow"
    for n in range(listed - 2):
        shutil.copytree(small_state / "flow" / small, flow / f"copy-20261201-0000{n:02d}-abcd")
    shutil.copytree(small_state / "flow" / small, flow / small)
    times = [fetch_ms(f"{origin}/") for _ in range(runs)]
    waits = []
    for n in range(runs):
        with urllib.request.urlopen(f"{origin}/events", timeout=300) as stream:
            began = time.perf_counter()
            shutil.copytree(small_state / "flow" / small, flow / f"new-20261201-0000{n:02d}-abcd")
            while not stream.readline().startswith(b"data:"):
                pass
            waits.append((time.perf_counter() - began) * 1000)
    return {
        "runs_list_listed_ms": round(statistics.median(times), 1),
        "runs_event_listed_ms": round(statistics.median(waits), 1),
        "runs_refetch_listed_ms": round(fetch_ms(f"{origin}/?part=1"), 1),
        "listed": listed + runs,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--listed", type=int, default=50)
    parser.add_argument("--live", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="crw-web-bench-") as tmp:
        state = Path(tmp) / "state"
        made = time.perf_counter()
        stop_run: Callable[[], None] = lambda: None  # noqa: E731
        if args.live:
            small_state = Path(tmp) / "small"
            small = finished_run(small_state, 100)
            for n in range(args.listed - 1):
                copy = state / "flow" / f"copy-20261201-0000{n:02d}-abcd"
                shutil.copytree(small_state / "flow" / small, copy)
            run, pid, stop_run = running_run(state, args.calls)
        else:
            run = finished_run(state, args.calls)
        made_s = time.perf_counter() - made
        view = subprocess.Popen(
            [sys.executable, "-m", "crw", "flow", "ui", "--state", str(state), "--json"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=environ(state),
            cwd=REPO,
            start_new_session=True,
        )
        try:
            assert view.stdout is not None
            view.stdout.readline()
            origin = f"http://127.0.0.1:{json.loads(view.stdout.readline())['port']}"
            pages = {
                "run_page": f"{origin}/runs/{run}",
                "run_page_last_calls": f"{origin}/runs/{run}?page={-(-args.calls // 100)}",
                "rows_page": f"{origin}/runs/{run}?before=70000",
                "runs_list": f"{origin}/",
                "run_part": f"{origin}/runs/{run}?part=1",
                "call_page": f"{origin}/runs/{run}/calls/n{args.calls // 2:05d}.1",
                "timeline": f"{origin}/runs/{run}/timeline.svg",
            }
            figures: dict[str, object] = {"calls": args.calls, "made_s": round(made_s, 1)}
            if args.live:
                figures |= live_figures(origin, run, state, pid)
            for name, url in pages.items():
                times = [fetch_ms(url) for _ in range(args.runs)]
                figures[f"{name}_ms"] = round(statistics.median(times), 1)
                figures[f"{name}_first_ms"] = round(times[0], 1)
            events = [fetch_ms(f"{origin}/runs/{run}/events", event=True) for _ in range(args.runs)]
            figures["first_event_ms"] = round(statistics.median(events), 1)
            figures["timeline_cli_ms"] = timeline_cli_ms(state, run, Path(tmp), args.runs)
            if args.listed > 1 and not args.live:
                figures |= listed_figures(state, Path(tmp), origin, args.listed, args.runs)
            figures["load"] = os.getloadavg()
            figures["met"] = figures["run_page_ms"] < TARGET_MS  # type: ignore[operator]
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(view.pid, signal.SIGKILL)
            view.wait()
            stop_run()
    if args.json:
        print(json.dumps(figures))
    else:
        for name, value in figures.items():
            print(f"{name}: {value}")


if __name__ == "__main__":
    main()
