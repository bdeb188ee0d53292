"""Latency of a session run on the simulated host, as its owner sees it.

Starts `crw host sim serve` and a session run (`crw flow start … --backend
session`, a real detached run process) of a workflow of N independent nodes in a
temporary state directory, and plays the run's owner (`crw.cli.demo.scripted_owner`: `crw flow
next` in-process, the subagents spawned on the simulated host). It measures:

- bound: from just before the dispatch report is written (with the function
  `crw flow dispatched` writes it with) to the moment the reply file exists
  (looked for every 0.5 ms); p50 and p99 over the N binds.
- terminal: from a subagent's turn end to the `at` of its call's terminal row in
  the journal. The turn's `completedAt` (thread/read) is whole epoch seconds, too
  coarse, so the end is the `emittedAtMs` of the host's `turn/completed`
  notification, stamped by the same clock the moment the host ends the turn;
  p50 and p99 over the N calls.
- next cold: `crw flow next RUN --json` in a fresh process, median of 20.

Prints a table, or with --json exactly {"bound_p50_ms", "bound_p99_ms",
"terminal_p50_ms", "terminal_p99_ms", "next_cold_ms"}.

    .venv/bin/python bench/latency.py [--json] [--calls N]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from crw.bus.inbox import Report, reply_path, write_report  # noqa: E402
from crw.cli.demo.scripted_owner import ScriptedOwner  # noqa: E402
from crw.cli.run.start import start_run  # noqa: E402
from crw.cli.run.start_report import StartOutcome  # noqa: E402
from crw.clock import system_clock  # noqa: E402
from crw.engine.run.rundir import RunDir  # noqa: E402
from crw.host.client import HostClient  # noqa: E402
from crw.host.connect import connect_host  # noqa: E402
from crw.host.sim.process import launch_sim, stop_sim  # noqa: E402
from crw.host.uri import parse_host_uri  # noqa: E402
from crw.journal.log import read_journal  # noqa: E402

CRW = [str(Path(sys.executable).parent / "crw")]
TURN_SECONDS = 0.1
"""How long each simulated turn takes."""
REPLY_LOOK = 0.0005
"""Seconds between two looks for the reply file."""
TARGETS = {
    "bound_p50_ms": 20,
    "bound_p99_ms": 100,
    "terminal_p50_ms": 50,
    "terminal_p99_ms": None,
    "next_cold_ms": 150,
}


def workflow(calls: int) -> str:
    """N independent nodes, each a one-turn call with a small schema."""
    head = f'name = "latency"\npool = {calls}\n'
    schema = '{ type = "object", required = ["ok"], properties = { ok = { type = "boolean" } } }'
    nodes = [
        f'\n[[node]]\nid = "n{i:03d}"\nrole = "explorer"\ntask = "Answer ok."\nschema = {schema}\n'
        for i in range(calls)
    ]
    return head + "".join(nodes)


class TimedOwner(ScriptedOwner):
    """The scripted owner, whose dispatch report is timed to its reply file."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.bound_ms: list[float] = []
        self.reported_at: dict[str, float] = {}
        """Per call: time.time() (ms) just before its first report was written."""

    async def dispatched(self, step: dict[str, Any], agent: str) -> dict[str, Any]:
        run = RunDir(Path(self.state or "") / "flow" / self.run)

        def report_and_wait() -> dict[str, Any]:
            report = Report.new(
                self.run, step["call"], step["k"], step["attempt"], agent, system_clock()
            )
            path = reply_path(run, report.id)
            self.reported_at.setdefault(step["call"], time.time() * 1000)
            t0 = time.perf_counter()
            write_report(run, report)
            while not path.exists():
                time.sleep(REPLY_LOOK)
            self.bound_ms.append((time.perf_counter() - t0) * 1000)
            body = json.loads(path.read_bytes())
            assert isinstance(body, dict)
            return body

        return await trio.to_thread.run_sync(report_and_wait)


async def start_session(state: Path, socket: Path, wf: Path, owner: str) -> StartOutcome:
    """A session run of `wf` on the simulated host, started as `crw flow start` does."""
    env = dict(os.environ) | {"CODEX_HOME": str(state / "codex-home")}
    return await trio.to_thread.run_sync(
        lambda: start_run(
            wf, backend="session", owner=owner, host=f"unix:{socket}", state=str(state), environ=env
        )
    )


async def play(state: Path, socket: Path, wf: Path) -> tuple[str, TimedOwner, dict[str, int]]:
    """Run the workflow as its owner; the run id, the owner (its bind latencies)
    and each turn's end (turn id -> emittedAtMs of its turn/completed)."""
    ended: dict[str, int] = {}
    async with connect_host(parse_host_uri(f"unix:{socket}")) as client:
        await client.request("sim/script", {"match": {}, "behaviour": {"seconds": TURN_SECONDS}})
        owner_id = str((await client.request("sim/startOwner", {}))["threadId"])
        outcome = await start_session(state, socket, wf, owner_id)
        owner = TimedOwner(client, outcome.spec.id, owner_id, state=str(state), wait=5.0)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(collect_turn_ends, client, ended)
            with trio.fail_after(300):
                last = await owner.play(lambda taken: None)
            nursery.cancel_scope.cancel()
    if last["ended_status"] != "completed":
        raise SystemExit(f"the run did not complete: {last['state']} {last['ended_status']}")
    return outcome.spec.id, owner, ended


async def collect_turn_ends(client: HostClient, ended: dict[str, int]) -> None:
    with client.notifications(buffer=4096) as notes:
        async for note in notes:
            if note.method == "turn/completed" and note.emittedAtMs is not None:
                ended[str(note.params["turn"]["id"])] = note.emittedAtMs


async def check_completed_at(socket: Path, thread_id: str) -> Any:
    """A subagent turn's completedAt as thread/read shows it (to say its unit)."""
    async with connect_host(parse_host_uri(f"unix:{socket}")) as client:
        thread = await client.request("thread/read", {"threadId": thread_id, "includeTurns": True})
        return thread["thread"]["turns"][-1]["completedAt"]


def at_ms(row: dict[str, Any]) -> float:
    return dt.datetime.fromisoformat(row["at"].replace("Z", "+00:00")).timestamp() * 1000


def committed_ms(rows: list[dict[str, Any]], reported: dict[str, float]) -> list[float]:
    """Per call: from its report to the `at` of its thread_started row (the bind
    rows committed; the reply is written after)."""
    return [
        at_ms(row) - reported[row["call"]]
        for row in rows
        if row["row"] == "thread_started" and row.get("call") in reported
    ]


def terminal_ms(rows: list[dict[str, Any]], ended: dict[str, int]) -> list[float]:
    """Per call: its terminal row's `at` less its last turn's end."""
    last_turn: dict[str, str] = {}
    figures = []
    for row in rows:
        call = str(row.get("call"))
        if row["row"] == "turn_started":
            last_turn[call] = row["turn_id"]
        elif row["row"] in ("completed", "null_model", "held") and call in last_turn:
            figures.append(at_ms(row) - ended[last_turn[call]])
    return figures


async def live_run(state: Path, socket: Path, wf: Path) -> tuple[str, int]:
    """A run that waits on its first step (nobody takes it): the run `next` is for."""
    async with connect_host(parse_host_uri(f"unix:{socket}")) as client:
        owner_id = str((await client.request("sim/startOwner", {}))["threadId"])
    outcome = await start_session(state, socket, wf, owner_id)
    assert outcome.pid is not None
    return outcome.spec.id, outcome.pid


def next_cold(run: str, state: Path, runs: int = 20) -> float:
    argv = [*CRW, "flow", "next", run, "--state", str(state), "--json"]
    samples = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
        samples.append((time.perf_counter() - t0) * 1000)
    return statistics.median(samples)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def measure(calls: int) -> tuple[dict[str, float], dict[str, Any]]:
    with tempfile.TemporaryDirectory(prefix="crw-latency-") as tmp:
        state = Path(tmp) / "state"
        state.mkdir()
        socket = state / "host.sock"
        wf = Path(tmp) / "latency.toml"
        wf.write_text(workflow(calls))
        host = launch_sim(socket, state / "codex-home", state / "host.log")
        try:
            run, owner, ended = trio.run(play, state, socket, wf)
            bound = owner.bound_ms
            rows = read_journal(RunDir(state / "flow" / run).journal).rows
            thread = next(r["thread_id"] for r in rows if r["row"] == "thread_started")
            completed_at = trio.run(check_completed_at, socket, thread)
            waiting, pid = trio.run(live_run, state, socket, wf)
            try:
                cold = next_cold(waiting, state)  # a live run with a step waiting
            finally:
                os.kill(pid, signal.SIGTERM)
        finally:
            stop_sim(host)
        terminal = terminal_ms(rows, ended)
        figures = {
            "bound_p50_ms": percentile(bound, 0.5),
            "bound_p99_ms": percentile(bound, 0.99),
            "terminal_p50_ms": percentile(terminal, 0.5),
            "terminal_p99_ms": percentile(terminal, 0.99),
            "next_cold_ms": cold,
        }
        info = {
            "binds": len(bound),
            "terminals": len(terminal),
            "bound_max_ms": max(bound),
            "terminal_max_ms": max(terminal),
            "completed_at": completed_at,
            "committed_p50_ms": percentile(committed_ms(rows, owner.reported_at), 0.5),
        }
    return {name: round(value, 1) for name, value in figures.items()}, info


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    figures, info = measure(args.calls)
    if args.json:
        print(json.dumps(figures))
        return
    print(f"session run of {args.calls} independent calls on the simulated host")
    print(
        f"  ({info['binds']} binds, {info['terminals']} terminal rows; turns of {TURN_SECONDS} s)"
    )
    print(f"  {'figure':<18} {'ms':>8} {'target':>8}")
    for name, value in figures.items():
        target = TARGETS[name]
        mark = "" if target is None else ("  ok" if value <= target else "  MISSED")
        print(f"  {name:<18} {value:>8.1f} {target if target else '-':>8}{mark}")
    print(
        f"  max bound {info['bound_max_ms']:.1f} ms, max terminal {info['terminal_max_ms']:.1f} ms"
    )
    print(f"  report -> bind rows committed, p50 {info['committed_p50_ms']:.1f} ms")
    print(f"  a turn's completedAt reads {info['completed_at']!r} (whole epoch seconds)")


if __name__ == "__main__":
    main()
