"""The CPU of one read of `crw flow next` on a live session run, and on it ended.

A session run of N independent one-turn calls (bench/scale.py's workflow, pool 8,
instant turns on `crw host sim serve`) is played by bench/scale.py's FastOwner.
Three figures per size, each the CPU of `next_command(RUN, wait=0, json=True)` in
this process (the calling thread's CPU, `time.thread_time`), in ms:

- `during_ms`: the owner's own asks while the run goes (`--wait 1`), median and
  mean over all of them (the mean carries the reads that write a snapshot);
- `mid_ms`: the owner stopped once half the calls completed, the run live and
  waiting on its steps, --reads asks, median;
- `ended_ms`: the run ended and its process gone, --reads asks, median.

Beside each, counts per read: rows the reads decoded, snapshots written, journal
bytes read. A fresh `crw flow next` process pays these too (plus its start-up).

    .venv/bin/python bench/next_read.py [--sizes 1000,10000] [--reads 15] [--json]
        [--tmp DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import json
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import trio

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import scale  # noqa: E402

import crw.journal.snapshot as snapshot_module  # noqa: E402
from crw.cli.demo.scripted_owner import DONE_STATES, IDLE_PAUSE  # noqa: E402
from crw.cli.owner.next import next_command  # noqa: E402
from crw.engine.run.rundir import RunDir  # noqa: E402

COUNTS: Counter[str] = Counter()


def _counted(module: Any, name: str, count: Callable[..., None]) -> None:
    original = getattr(module, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        count(result, *args, **kwargs)
        return result

    setattr(module, name, wrapper)


def _rows(result: Any, *args: Any, **kwargs: Any) -> None:
    COUNTS["rows_decoded"] += len(result.rows)
    COUNTS["bytes_decoded"] += len(args[0])


def _save(result: Any, *args: Any, **kwargs: Any) -> None:
    COUNTS["snapshot_saves"] += 1


_counted(snapshot_module, "decode", _rows)
_counted(snapshot_module, "_save", _save)


PROFILE: list[str] = []
"""With --profile: the phases whose reads are profiled (cProfile, to stderr)."""
KEEP: Path | None = None
"""With --keep DIR: a copy of the run's directory mid-run and ended, there."""
DURING: cProfile.Profile | None = None
"""With --profile during: the profile of all the owner's asks."""


def one_read(run: str, state: Path, wait: float) -> float:
    """The thread CPU ms of one `next_command` (its output dropped)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        t0 = time.thread_time()
        next_command(run, wait=wait, state=str(state), json=True)
        cpu = time.thread_time() - t0
    COUNTS["reads"] += 1
    return cpu * 1000


def reads_of(phase: str, run: str, state: Path, reads: int) -> list[float]:
    """`reads` reads' CPU ms; profiled after them when --profile names `phase`."""
    samples = [one_read(run, state, 0.0) for _ in range(reads)]
    if phase in PROFILE:
        import pstats

        profile = cProfile.Profile()
        profile.runcall(one_read, run, state, 0.0)
        print(f"--- {phase}", file=sys.stderr)
        pstats.Stats(profile, stream=sys.stderr).sort_stats("cumulative").print_stats(30)
    return samples


def figures(samples: list[float], counts: Counter[str]) -> dict[str, Any]:
    reads = counts["reads"] or 1
    return {
        "median_ms": round(statistics.median(samples), 2),
        "mean_ms": round(statistics.fmean(samples), 2),
        "reads": counts["reads"],
        **{f"{k}_per_read": round(v / reads, 2) for k, v in counts.items() if k != "reads"},
    }


@contextlib.contextmanager
def counting() -> Iterator[Counter[str]]:
    COUNTS.clear()
    seen: Counter[str] = Counter()
    try:
        yield seen
    finally:
        seen.update(COUNTS)


class MeasuredOwner(scale.FastOwner):
    """FastOwner timing each of its asks, stopping once `stop_at` calls completed."""

    def __init__(self, *args: Any, stop_at: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.stop_at = stop_at
        self.samples: list[float] = []
        self.halted = trio.Event()

    async def next(self) -> dict[str, Any]:
        def run() -> dict[str, Any]:
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                t0 = time.thread_time()
                if DURING is not None:
                    DURING.runcall(
                        next_command, self.run, wait=self.wait, state=self.state, json=True
                    )
                else:
                    next_command(self.run, wait=self.wait, state=self.state, json=True)
                self.samples.append((time.thread_time() - t0) * 1000)
            COUNTS["reads"] += 1
            answer: dict[str, Any] = json.loads(out.getvalue())
            return answer

        return await trio.to_thread.run_sync(run)

    def completed(self) -> int:
        journal = RunDir(Path(self.state or "") / "flow" / self.run).journal
        return journal.read_bytes().count(b'"row":"completed"')

    async def play_until(self) -> None:
        async with self.watching():
            while self.completed() < self.stop_at:
                answer = await self.next()
                async with trio.open_nursery() as nursery:
                    for step in answer["steps"]:
                        nursery.start_soon(self.take, step)
                if answer["state"] in DONE_STATES:
                    break
                if not answer["steps"]:
                    await trio.sleep(IDLE_PAUSE)
        self.halted.set()


async def drive(trial: scale.Trial, reads: int) -> dict[str, Any]:
    wf = trial.state.parent / "scale.toml"
    wf.write_text(scale.workflow(trial.calls))
    (wf.parent / "s.json").write_text(json.dumps(scale.SCHEMA))
    result: dict[str, Any] = {}
    async with scale.host_client(trial.socket) as client:
        await client.request("sim/script", {"match": {}, "behaviour": {"seconds": 0}})
        owner = str((await client.request("sim/startOwner", {}))["threadId"])
        await scale.busy(client, owner)
        await trio.to_thread.run_sync(scale.start, trial, wf, owner)
        player = MeasuredOwner(
            client, trial.run_id, owner, state=str(trial.state), wait=1.0, stop_at=trial.calls // 2
        )
        async with trio.open_nursery() as nursery:
            with counting() as during:
                await player.play_until()
            first = list(player.samples)
            with counting() as mid:
                samples = reads_of("mid", trial.run_id, trial.state, reads)
            result["mid"] = figures(samples, mid)
            if KEEP is not None:
                run_root = trial.state / "flow" / trial.run_id
                shutil.copytree(run_root, KEEP / f"{trial.calls}-mid", symlinks=True)
            player.samples.clear()
            player.stop_at = trial.calls + 1
            with counting() as rest:
                nursery.start_soon(player.play_until)
                await scale.wait_exit(trial)
                nursery.cancel_scope.cancel()
            during.update(rest)
            result["during"] = figures(first + player.samples, during)
    with counting() as ended:
        samples = reads_of("ended", trial.run_id, trial.state, reads)
    result["ended"] = figures(samples, ended)
    journal = RunDir(trial.state / "flow" / trial.run_id).journal
    result["journal_bytes"] = journal.stat().st_size
    if KEEP is not None:
        shutil.copytree(journal.parent, KEEP / f"{trial.calls}-ended", symlinks=True)
    return result


def measure(calls: int, reads: int, where: Path) -> dict[str, Any]:
    with scale.trial_with_host("session", calls, where, "crw-next-read-") as trial:
        return trio.run(drive, trial, reads)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sizes", default="1000")
    parser.add_argument("--reads", type=int, default=15)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--profile", default="", help="mid,ended: profile one read of each")
    parser.add_argument("--keep", type=Path, help="copy the run's directory there")
    parser.add_argument("--tmp", type=Path, default=Path(tempfile.gettempdir()))
    args = parser.parse_args()
    PROFILE.extend(p for p in args.profile.split(",") if p)
    sizes = [int(s) for s in args.sizes.split(",")]
    global DURING, KEEP
    KEEP = args.keep
    if "during" in PROFILE:
        DURING = cProfile.Profile()
    results = {str(n): measure(n, args.reads, args.tmp) for n in sizes}
    if DURING is not None:
        import pstats

        print("--- during", file=sys.stderr)
        stats = pstats.Stats(DURING, stream=sys.stderr)
        stats.sort_stats("cumulative").print_stats(45)
        stats.sort_stats("tottime").print_stats(25)
    print(json.dumps(results, indent=None if args.json else 2))


if __name__ == "__main__":
    main()
