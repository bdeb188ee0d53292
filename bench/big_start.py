"""How a workflow's load and start grow with its nodes, to 100,000.

For each size N, a workflow of N independent one-turn nodes (bench/scale.py's,
some 80 bytes a node: 100,000 nodes are 8 MB, so `$CRW_MAX_FILE_BYTES` is set to
the file's size), pool 8, the App Server backend on a fresh `crw host sim serve`
with instant turns, in a fresh state directory under `--tmp`:

- `load_s`: `load_workflow` in this process (parse, validation, the graph's checks);
- `start_run_s`: `start_run` (what `crw flow start` does, in-process: its checks,
  the run directory, the launch, the wait for the started row);
- `start_s`: from the start to the `at` of the run's first `prepared` row: the
  above and the run process's own load of the workflow, its replay and its first
  admission (the target: < 5 s at 100,000 nodes);
- `cpu_s`: the CPU seconds (user+sys) of the same span, this process's part
  (`start_run`) and the run process's (its rusage: it kills itself right after
  its first prepared row is durable, `CRW_CRASH_AFTER=prepared`); on a loaded
  machine the wall figures stretch, this one much less.

The run process is reaped by pid, whatever happens. Prints a table, or with
--json one object {N: {"bytes", "load_s", "start_run_s", "start_s", "cpu_s",
"per_node_us"}}.

    .venv/bin/python bench/big_start.py [--sizes 10000,100000] [--json] [--tmp DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any

import trio
from resume import LIMIT, LOOK, Tail, at, script_host, until
from scale import SCHEMA, Trial, add_tmp_argument, start, trial_with_host, workflow

from crw.actors.crash import VARIABLE
from crw.engine.config.workflow import load_workflow
from crw.settings import MAX_FILE_BYTES_ENV, file_limit

SIZES = (10_000, 100_000)


def measure(trial: Trial) -> dict[str, Any]:
    wf = trial.state.parent / "scale.toml"
    wf.write_text(workflow(trial.calls))
    (wf.parent / "s.json").write_text(json.dumps(SCHEMA))
    size = wf.stat().st_size
    trio.run(script_host, trial)
    t0 = time.perf_counter()
    with file_limit(size):
        load_workflow(wf)
    load_s = time.perf_counter() - t0
    t0, cpu0 = time.time(), time.process_time()
    start(trial, wf, None, {MAX_FILE_BYTES_ENV: str(size), VARIABLE: "prepared"})
    start_run_s, start_run_cpu = time.time() - t0, time.process_time() - cpu0
    tail = Tail(trial.state / "flow" / trial.run_id / "journal.jsonl")
    prepared = until(tail, lambda row: row["row"] == "prepared", LIMIT)
    start_s = at(prepared) - t0
    run_cpu = died(trial)
    return {
        "bytes": size,
        "load_s": round(load_s, 3),
        "start_run_s": round(start_run_s, 3),
        "start_s": round(start_s, 3),
        "cpu_s": round(start_run_cpu + run_cpu, 3),
        "per_node_us": round(start_s * 1e6 / trial.calls, 1),
    }


def died(trial: Trial) -> float:
    """The run process's CPU seconds, once it killed itself at its first prepared row."""
    assert trial.pid is not None
    deadline = time.monotonic() + LIMIT
    while True:
        pid, _status, usage = os.wait4(trial.pid, os.WNOHANG)
        if pid:
            trial.pid = None
            return usage.ru_utime + usage.ru_stime
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"the run process did not stop at its first prepared row in {LIMIT:g} s"
            )
        time.sleep(LOOK)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)))
    parser.add_argument("--json", action="store_true")
    add_tmp_argument(parser)
    args = parser.parse_args()
    try:
        sizes = sorted({int(s) for s in args.sizes.split(",")})
    except ValueError:
        parser.error(f"--sizes {args.sizes}: pass sizes as 10000,100000")
    results: dict[str, dict[str, Any]] = {}
    for nodes in sizes:
        with trial_with_host("app-server", nodes, args.tmp, "crw-big-start-") as trial:
            results[str(nodes)] = measure(trial)
    if args.json:
        print(json.dumps(results))
        return
    for size, figures in results.items():
        print(
            f"{size:>7} nodes ({figures['bytes']:>9} B): load {figures['load_s']:6.3f} s, "
            f"start_run {figures['start_run_s']:6.3f} s, start to first prepared "
            f"{figures['start_s']:6.3f} s ({figures['per_node_us']} us a node; target < 5 s), "
            f"CPU {figures['cpu_s']:6.3f} s"
        )


if __name__ == "__main__":
    main()
