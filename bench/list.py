"""`crw flow list` on a state directory of many finished runs, each a fresh process.

One real run is made (`crw host sim serve` with instant turns, the app-server
backend, --calls independent one-turn calls, its detached process waited for, as
bench/cli.py makes its finished run) and its run directory copied --count times
under new run ids (300 by default): the same journal and the replay snapshot its
process left. Figures, the median of --runs processes of
`python -m crw flow list --json`:

- `list_ms` (and `list_cpu_ms`): every run read from its tail (its snapshot, and
  no row after it);
- `list_filtered_ms`: the same with every filter given (`--status ended
  --workflow cold --since 2000-01-01 --limit 5`), which keep 5 of the runs: each
  run is read all the same (the newest five by their started rows);
- `list_nosnapshot_ms`: the snapshots removed first, so each journal (a small one,
  under list's 1 MiB tail) is decoded whole.

`ms_per_run` is `list_ms / count`. `load` is the load average before and after.

    .venv/bin/python bench/list.py [--count N] [--calls N] [--runs N] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from cli import finished_run, measure  # noqa: E402

from crw.journal.snapshot import SNAPSHOT  # noqa: E402


def copies(state: Path, run_id: str, count: int) -> None:
    """`count` copies of run `run_id` under new ids, run.json naming each."""
    flow = state / "flow"
    for n in range(count):
        copy_id = f"cold-20261130-{n // 3600:02d}{n // 60 % 60:02d}{n % 60:02d}-{n:04x}"
        shutil.copytree(flow / run_id, flow / copy_id, symlinks=True)
        spec = json.loads((flow / copy_id / "run.json").read_text())
        (flow / copy_id / "run.json").write_text(json.dumps(spec | {"id": copy_id}))
    shutil.rmtree(flow / run_id)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=300)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="crw-list-") as tmp:
        state = Path(tmp) / "runs" / "state"
        run_id = finished_run(state, args.calls)
        copies(state, run_id, args.count)
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE",)}
        env |= {"PYTHONPATH": str(REPO), "PYTHONPYCACHEPREFIX": str(Path(tmp) / "pyc")}
        argv = [sys.executable, "-m", "crw", "flow", "list", "--state", str(state), "--json"]
        filtered = [*argv, "--status", "ended", "--workflow", "cold", "--since", "2000-01-01"]
        filtered += ["--limit", "5"]
        timed = {"list": (argv, env), "list_filtered": (filtered, env)}
        figures: dict[str, Any] = measure(timed, args.runs, Path(tmp))
        for snapshot in (state / "flow").glob(f"*/{SNAPSHOT}"):
            snapshot.unlink()
        bare = measure({"list_nosnapshot": (argv, env)}, args.runs, Path(tmp))
        journal = next((state / "flow").glob("*/journal.jsonl")).stat().st_size
    figures |= bare | {"count": args.count, "calls": args.calls, "runs": args.runs}
    figures["journal_kb"] = round(journal / 1024, 1)
    figures["ms_per_run"] = round(figures["list_ms"] / args.count, 2)
    figures["load"] = [round(x, 2) for x in (*load_before, *os.getloadavg())]
    if args.json:
        print(json.dumps(figures))
        return
    print(
        f"crw flow list --json, {args.count} runs of {args.calls} calls "
        f"({figures['journal_kb']} KiB journal each), median of {args.runs} processes"
    )
    print(
        f"  from the tails: {figures['list_ms']:.1f} ms ({figures['ms_per_run']} ms a run), "
        f"cpu {figures['list_cpu_ms']:.1f} ms"
    )
    print(
        f"  filtered:       {figures['list_filtered_ms']:.1f} ms, "
        f"cpu {figures['list_filtered_cpu_ms']:.1f} ms"
    )
    print(
        f"  no snapshots:   {figures['list_nosnapshot_ms']:.1f} ms, "
        f"cpu {figures['list_nosnapshot_cpu_ms']:.1f} ms"
    )
    print(f"  load average before, after: {figures['load']}")


if __name__ == "__main__":
    main()
