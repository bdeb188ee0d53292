"""How fast a run's journal reads back: read_journal + replay of 100,000 rows.

A synthetic run of calls, each with the life a session call writes (prepared,
step_published, thread_started + turn_started, a repair's step_published and
turn_started, completed), framed exactly as the journal writer frames it, in
batches as the writer commits them. Prints a table, or with --json one object:
{"rows", "read_ms", "replay_ms", "total_ms", "parse_models_ms"} (wall, medians)
and the CPU time of this process (`time.process_time`, which moves less with the
load of a shared machine) as "cpu_read_ms", "cpu_replay_ms", "cpu_total_ms"
(medians) and "cpu_total_min_ms" (the fastest trial).

    .venv/bin/python bench/replay.py [--rows N] [--trials N] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from journal_file import write_batches

from crw.journal.log import read_journal
from crw.journal.replay import replay
from crw.journal.rows import (
    Allocation,
    Completed,
    Prepared,
    RowModel,
    Started,
    StepPublished,
    ThreadStarted,
    Tokens,
    TurnStarted,
)

AT = "2026-11-29T00:00:00.000000Z"


def call_life(n: int) -> list[list[RowModel]]:
    """The batches one session call commits, with a repair turn."""
    call = f"node{n % 50}.{n // 50 + 1}"
    packet = f"/state/flow/run/steps/{call}/packet-t1-a1.md"
    step = {"call": call, "attempt": 1, "role": "executor", "agent_type": "executor"}
    return [
        [
            Prepared(
                call=call,
                node=f"node{n % 50}",
                role="executor",
                backend="session",
                allocation=Allocation(workspace=f"/w/{call}", kind="worktree"),
                input_digest="sha256:" + "ab" * 32,
            )
        ],
        [
            StepPublished(
                **step,
                k=1,
                op=f"{call}/t1",
                marker=f"{call}/t1-a1",
                action="spawn",
                packet=packet,
                conversation_turn=1,
            )
        ],
        [
            ThreadStarted(
                call=call,
                thread_id=f"th-{n}",
                attempt=1,
                model="gpt-5",
                effort="high",
                via="session",
                marker=f"{call}/t1-a1",
            ),
            TurnStarted(
                call=call,
                k=1,
                op=f"{call}/t1",
                turn_id=f"tu-{n}-1",
                attempt=1,
                marker=f"{call}/t1-a1",
                conversation_turn=1,
            ),
        ],
        [
            StepPublished(
                **step,
                k=2,
                op=f"{call}/t2",
                marker=f"{call}/t2-a1",
                action="send_input",
                agent_id=f"th-{n}",
                repair=True,
                conversation_turn=2,
            )
        ],
        [
            TurnStarted(
                call=call,
                k=2,
                op=f"{call}/t2",
                turn_id=f"tu-{n}-2",
                attempt=1,
                marker=f"{call}/t2-a1",
                conversation_turn=2,
            )
        ],
        [
            Completed(
                call=call,
                result={"summary": "done", "files": ["a.py", "b.py"]},
                result_digest="sha256:" + "cd" * 32,
                raw_text='{"summary": "done", "files": ["a.py", "b.py"]}',
                extracted=False,
                tokens=Tokens(
                    input=1200, cached_input=300, output=250, reasoning_output=90, total=1450
                ),
            )
        ],
    ]


def batches(rows: int) -> Iterator[list[RowModel]]:
    """The started row, then whole call lives while they fit in about `rows` rows."""
    seq = 1
    life: list[list[RowModel]] = [[Started(backend="session", process="p", pid=1)]]
    n = 0
    while seq + sum(len(b) for b in life) <= rows:
        yield from life
        seq += sum(len(b) for b in life)
        life = call_life(n)
        n += 1


def write_journal(path: Path, rows: int) -> int:
    """Write about `rows` rows in the writer's framing; returns the count written."""
    return write_batches(path, batches(rows), AT)


def measure(path: Path, trials: int) -> dict[str, float]:
    reads, replays, models, cpu_reads, cpu_replays = [], [], [], [], []
    # The trial before is let go only after this one is timed: assigned over, its
    # 100,000 rows and its state were freed inside the read's and the replay's
    # timings (~50-80 ms), which no process reading its journal pays; held while
    # this trial builds its own, none of its memory is reused, as none is in a
    # process that reads its journal once.
    held: list[object] = []
    for _ in range(trials):
        c0, t0 = time.process_time(), time.perf_counter()
        read = read_journal(path)
        c1, t1 = time.process_time(), time.perf_counter()
        state = replay(read.rows)
        c2, t2 = time.process_time(), time.perf_counter()
        as_models = read.row_models()
        t3 = time.perf_counter()
        assert state.calls and read.torn is None
        held[:] = [read, state, as_models]
        reads.append(t1 - t0)
        replays.append(t2 - t1)
        models.append(t3 - t2)
        cpu_reads.append(c1 - c0)
        cpu_replays.append(c2 - c1)
    read_ms = statistics.median(reads) * 1000
    replay_ms = statistics.median(replays) * 1000
    cpu_totals = [read + fold for read, fold in zip(cpu_reads, cpu_replays, strict=True)]
    return {
        "read_ms": round(read_ms, 1),
        "replay_ms": round(replay_ms, 1),
        "total_ms": round(read_ms + replay_ms, 1),
        "parse_models_ms": round(statistics.median(models) * 1000, 1),
        "cpu_read_ms": round(statistics.median(cpu_reads) * 1000, 1),
        "cpu_replay_ms": round(statistics.median(cpu_replays) * 1000, 1),
        "cpu_total_ms": round(statistics.median(cpu_totals) * 1000, 1),
        "cpu_total_min_ms": round(min(cpu_totals) * 1000, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=Path(__file__).resolve().parent) as directory:
        path = Path(directory) / "journal.jsonl"
        rows = write_journal(path, args.rows)
        figures = {"rows": rows, **measure(path, args.trials)}
    if args.json:
        print(json.dumps(figures))
        return
    print(f"journal of {rows} rows ({args.trials} trials, medians)")
    print(f"  read_journal        {figures['read_ms']:8.1f} ms")
    print(f"  replay              {figures['replay_ms']:8.1f} ms")
    print(f"  read + replay       {figures['total_ms']:8.1f} ms   (target <= 500 ms)")
    print(
        f"  CPU: read {figures['cpu_read_ms']:.1f}, replay {figures['cpu_replay_ms']:.1f}, "
        f"both {figures['cpu_total_ms']:.1f} ms (fastest trial {figures['cpu_total_min_ms']:.1f})"
    )
    print(
        f"  as row models       {figures['parse_models_ms']:8.1f} ms  (pydantic, off the read path)"
    )


if __name__ == "__main__":
    main()
