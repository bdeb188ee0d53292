"""Start and resume at scale: a run of N calls started, killed at its midpoint, resumed.

A workflow of N independent one-turn nodes (bench/scale.py's), pool 8, on the
simulated host with instant turns, the App Server backend, in a fresh state
directory under `--tmp` (the system temp directory) with a fresh `crw host sim serve`:

1. `start_run` (what `crw flow start` does, in-process), timed to the `at` of the
   run's first `prepared` row: the workflow's load, the run directory, the launch,
   the run process's own load of the workflow and its first admission (`start_s`;
   `start_run_s` is the part in the starting process).
2. The run goes on until half its calls have completed: its process SIGKILLs
   itself right after the completed row of the call admitted at the midpoint is
   durable (`CRW_CRASH_AFTER`, `crw.actors.crash`: a crash, whatever was in flight
   stays in flight). The kill point is the run's, not the bench's: a bench that
   looked at the journal too late (a loaded machine) killed a run that had
   already ended, and nothing was left to resume.
3. The run is resumed as `crw flow resume RUN --detach` resumes it (the launch
   under the run's launch lock; a process that exits without its started row
   fails the bench with the line it gave), timed to the `at` of the first row the new
   process writes (`first_row_s`: its started row, after the workflow's load and the
   journal's replay through its snapshot) and to the first row after that
   (`first_call_row_s`: the journal read whole, the calls replayed, the gate's
   admission or an in-flight call's next row: what a resumed run does first).

Every process is real and reaped by pid when the bench is done, whatever happens.
Prints a table, or with --json one object: {"calls", "rows_at_kill", "start_run_s",
"start_s", "first_row_s", "first_row", "first_call_row_s", "first_call_row"}.

    .venv/bin/python bench/resume.py [--calls 10000] [--json] [--limit SECONDS]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import trio
from scale import SCHEMA, Trial, add_tmp_argument, host_client, start, trial_with_host, workflow

from crw.actors.crash import VARIABLE
from crw.engine.run.launch import launch_once
from crw.engine.run.launch_record import LaunchFailure
from crw.engine.run.rundir import RunDir
from crw.engine.run.runspec import read_run_spec
from crw.journal.log import read_journal

CALLS = 10_000
LIMIT = 300.0
"""Seconds the bench may wait for the midpoint, and for each row it times."""
LOOK = 0.005
"""Seconds between two looks at the journal."""


class Tail:
    """The journal's rows as they are appended, read from where the last look ended."""

    def __init__(self, journal: Path) -> None:
        self.journal = journal
        self.offset = 0

    def rows(self) -> list[dict[str, Any]]:
        """The whole lines appended since the last look."""
        try:
            with self.journal.open("rb") as file:
                file.seek(self.offset)
                data = file.read()
        except FileNotFoundError:
            return []
        end = data.rfind(b"\n") + 1
        self.offset += end
        rows = [json.loads(line) for line in data[:end].splitlines()]
        return rows


def at(row: dict[str, Any]) -> float:
    return dt.datetime.fromisoformat(row["at"].replace("Z", "+00:00")).timestamp()


def until(tail: Tail, found: Any, limit: float) -> dict[str, Any]:
    """The first row appended from now on for which `found(row)` holds."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        for row in tail.rows():
            if found(row):
                return row
        time.sleep(LOOK)
    raise TimeoutError(f"no such row within {limit:g} s")


def kill_point(calls: int) -> str:
    """The run process's kill point (CRW_CRASH_AFTER): the completed row of the call
    of the node admitted at the midpoint (the gate admits the nodes in order, a
    pool at a time), so about half the calls have completed and the run has not
    ended."""
    return f"completed@n{calls // 2 - 1:05d}.1"


def died_at_midpoint(trial: Trial, run: RunDir, limit: float) -> None:
    """Reap the run process once it killed itself at its kill point; raise when it
    lives after `limit` seconds or stopped another way (the run ended, paused)."""
    assert trial.pid is not None
    deadline = time.monotonic() + limit
    while True:
        pid, status = os.waitpid(trial.pid, os.WNOHANG)
        if pid:
            break
        if time.monotonic() > deadline:
            raise TimeoutError(f"the run process did not reach its midpoint in {limit:g} s")
        time.sleep(LOOK)
    trial.pid = None
    last = read_journal(run.journal).rows[-1]["row"]
    if not os.WIFSIGNALED(status) or os.WTERMSIG(status) != signal.SIGKILL:
        raise RuntimeError(f"the run process exited ({status}, last row {last}); see {run.log}")


async def script_host(trial: Trial) -> None:
    async with host_client(trial.socket) as client:
        await client.request("sim/script", {"match": {}, "behaviour": {"seconds": 0}})


def measure(trial: Trial, limit: float) -> dict[str, Any]:
    wf = trial.state.parent / "scale.toml"
    wf.write_text(workflow(trial.calls))
    (wf.parent / "s.json").write_text(json.dumps(SCHEMA))
    trio.run(script_host, trial)
    t0 = time.time()
    start(trial, wf, None, {VARIABLE: kill_point(trial.calls)})
    start_run_s = time.time() - t0
    run = RunDir(trial.state / "flow" / trial.run_id)
    tail = Tail(run.journal)
    prepared = until(tail, lambda row: row["row"] == "prepared", limit)
    died_at_midpoint(trial, run, limit)
    rows_at_kill = read_journal(run.journal).last_seq
    tail.rows()
    spec = read_run_spec(run.run_json)
    t1 = time.time()
    launch = launch_once(run, trial.state, spec.env_overrides(), trial.environ(), lambda: None)
    trial.pid = launch.pid
    try:
        settled = launch.settle(limit)
        if isinstance(settled, LaunchFailure):
            raise RuntimeError(f"the resumed process did not start: {settled.reason}")
        if settled != "started":
            raise TimeoutError(f"the resumed process wrote no started row in {limit:g} s")
        first = until(tail, lambda row: row["seq"] > rows_at_kill, limit)
        after = until(tail, lambda row: row["seq"] > first["seq"], limit)
    finally:  # what was measured is in its rows: the resumed process is not needed
        launch.child.kill()
        launch.child.wait()
        trial.pid = None
    return {
        "calls": trial.calls,
        "rows_at_kill": rows_at_kill,
        "start_run_s": round(start_run_s, 3),
        "start_s": round(at(prepared) - t0, 3),
        "first_row_s": round(at(first) - t1, 3),
        "first_row": first["row"],
        "first_call_row_s": round(at(after) - t1, 3),
        "first_call_row": after["row"],
    }


def bench(calls: int, limit: float, where: Path) -> dict[str, Any]:
    with trial_with_host("app-server", calls, where, "crw-resume-") as trial:
        return measure(trial, limit)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--calls", type=int, default=CALLS)
    parser.add_argument("--limit", type=float, default=LIMIT, help="seconds per wait")
    parser.add_argument("--json", action="store_true")
    add_tmp_argument(parser)
    args = parser.parse_args()
    if args.calls < 2:
        parser.error(f"--calls {args.calls}: pass at least 2 calls")
    figures = bench(args.calls, args.limit, args.tmp)
    if args.json:
        print(json.dumps(figures))
        return
    print(f"{figures['calls']} calls, killed at {figures['rows_at_kill']} rows")
    print(f"  start_run (load, run dir, launch)    {figures['start_run_s']:7.3f} s")
    print(f"  start to the first prepared row      {figures['start_s']:7.3f} s   (target < 2 s)")
    print(f"  resume to its first row ({figures['first_row']})  {figures['first_row_s']:7.3f} s")
    print(
        f"  resume to the next row ({figures['first_call_row']})"
        f"  {figures['first_call_row_s']:7.3f} s   (target < 2 s)"
    )


if __name__ == "__main__":
    main()
