"""`crw flow ui` while a big run runs: its events' latency and its pages' times.

Used by `bench/web.py --live`: a run of --calls instant calls on the simulated
host (as `bench/cli.py` makes its finished run, but not waited for) is started
in a state directory where other runs are listed, the view serves that state,
one client follows the run's event stream and one the runs list's, and the runs
page and the run's page are fetched in turn until the run's process exits.

The latency of a row is from its append (its batch's `at`, the run process's
clock: the same machine's) to the event that brought it reaching the client: on
the run's stream the `rows` event that holds its seq, on the runs list's stream
the first `runs` event after it. Rows appended before the streams connected are
not counted. Figures in ms: median and p95 of each, the pages' median and p95.
"""

from __future__ import annotations

import json
import os
import statistics
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import trio
from cli import environ, host_request, prepare, reap, workflow

from crw.cli.run.start import start_run
from crw.engine.run.rundir import RunDir
from crw.host.sim.process import launch_sim, stop_sim
from crw.journal.log import read_journal

SCHEMA = {"type": "object", "required": ["ok"], "properties": {"ok": {"type": "boolean"}}}


def running_run(state: Path, calls: int) -> tuple[str, int, Callable[[], None]]:
    """A run of `calls` instant calls started on the simulated host, not waited
    for: its id, its process's pid, and what stops it and its host."""
    socket = prepare(state)
    wf = state.parent / "live.toml"
    wf.write_text(workflow(calls))
    (state.parent / "s.json").write_text(json.dumps(SCHEMA))
    host = launch_sim(socket, state / "codex-home", state / "live-host.log")
    pid: int | None = None
    try:
        trio.run(host_request, socket, "sim/script", {"match": {}, "behaviour": {"seconds": 0}})
        outcome = start_run(wf, backend="app-server", owner=None, host=f"unix:{socket}",
                            state=str(state), environ=environ(state))  # fmt: skip
        pid = outcome.pid
        assert pid is not None
    except BaseException:
        reap(pid)
        stop_sim(host)
        raise

    def stop() -> None:
        reap(pid)
        stop_sim(host)

    return outcome.spec.id, pid, stop


@dataclass
class Stream:
    """An event stream read in a thread: each event's arrival (epoch seconds),
    name and data."""

    url: str
    events: list[tuple[float, str, Any]] = field(default_factory=list)
    opened: float = 0.0

    def start(self) -> None:
        ready = threading.Event()
        threading.Thread(target=self._read, args=(ready,), daemon=True).start()
        ready.wait(60)

    def _read(self, ready: threading.Event) -> None:
        with urllib.request.urlopen(self.url, timeout=600) as answer:
            self.opened = time.time()
            ready.set()
            name = ""
            for line in answer:
                if line.startswith(b"event: "):
                    name = line[7:].strip().decode()
                elif line.startswith(b"data: "):
                    self.events.append((time.time(), name, json.loads(line[6:])))


def _ms(values: list[float]) -> dict[str, float]:
    if not values:
        return {"median": float("nan"), "p95": float("nan"), "n": 0}
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))]
    return {"median": round(statistics.median(ordered) * 1000, 1),
            "p95": round(p95 * 1000, 1), "n": len(ordered)}  # fmt: skip


def fetch_s(url: str) -> float:
    began = time.perf_counter()
    with urllib.request.urlopen(url, timeout=300) as answer:
        answer.read()
    return time.perf_counter() - began


def live_figures(origin: str, run: str, state: Path, pid: int) -> dict[str, Any]:
    """Follow the run until its process exits; the figures."""
    journal = RunDir.of(state, run).journal
    while not journal.exists():
        time.sleep(0.05)
    run_stream = Stream(f"{origin}/runs/{run}/events")
    runs_stream = Stream(f"{origin}/events")
    run_stream.start()
    runs_stream.start()
    load_before = os.getloadavg()
    pages: dict[str, list[float]] = {"runs_page": [], "run_page": []}
    urls = {"runs_page": f"{origin}/", "run_page": f"{origin}/runs/{run}"}
    while os.waitpid(pid, os.WNOHANG) == (0, 0):
        for name, url in urls.items():
            pages[name].append(fetch_s(url))
        time.sleep(0.5)
    time.sleep(2)  # the last rows' events
    rows = read_journal(journal).rows
    at = {row["seq"]: datetime.fromisoformat(row["at"]).timestamp() for row in rows}
    run_lat = [
        arrived - at[item["seq"]]
        for arrived, name, data in run_stream.events
        if name == "rows"
        for item in data
        if at[item["seq"]] > run_stream.opened
    ]
    runs_events = sorted(arrived for arrived, name, _ in runs_stream.events if name == "runs")
    runs_lat = []
    for appended in sorted(t for t in at.values() if t > runs_stream.opened):
        later = next((arrived for arrived in runs_events if arrived >= appended), None)
        if later is not None:
            runs_lat.append(later - appended)
    return {
        "live_rows": len(rows),
        "live_run_event_ms": _ms(run_lat),
        "live_runs_event_ms": _ms(runs_lat),
        "live_runs_page_ms": _ms(pages["runs_page"]),
        "live_run_page_ms": _ms(pages["run_page"]),
        "live_load_before": load_before,
        "live_load_after": os.getloadavg(),
    }
