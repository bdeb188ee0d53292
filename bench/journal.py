"""Journal benchmark: durable rows/s of the JournalWriter next to a naive writer and SQLite.

    .venv/bin/python bench/journal.py [--json] [--seconds S] [--trials N]

Every committer commits one row a commit and awaits its durability, in a loop,
for S seconds; rows/s is the median over N trials, trials of the three writers
interleaved. Compared:

- crw: `open_journal_writer`, committers are Trio tasks (group commit);
- naive: open, append, fsync and close per row, committers are threads;
- sqlite: WAL with synchronous=FULL, one INSERT + COMMIT per row, committers are
  threads with one connection each (SQLite serializes them on its write lock).

Latency: the median of one durable commit (a single committer) next to the
median of one raw `write` + fsync of one line on the same disk. Files live in a
temporary directory under the repository, so on the disk a run uses.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import trio

from crw.actors.journal_writer import open_journal_writer
from crw.journal.log import sync_data
from crw.journal.rows import Started

CONCURRENCY = (1, 8, 64)
LINE = (
    b'{"seq":1,"at":"2026-11-29T19:35:51.123456Z","row":"started","call":"c1",'
    b'"backend":"bench","process":"p-1","pid":4242,"commit_seq":1}\n'
)


def _row(committer: int, n: int) -> Started:
    return Started(call=f"c{committer}", backend="bench", process=f"p-{n}", pid=4242)


async def _crw_committers(path: Path, committers: int, seconds: float) -> float:
    count = 0
    async with open_journal_writer(path) as journal:
        deadline = time.perf_counter() + seconds

        async def commit_loop(committer: int) -> None:
            nonlocal count
            while time.perf_counter() < deadline:
                await journal.commit([_row(committer, count)])
                count += 1

        start = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for committer in range(committers):
                nursery.start_soon(commit_loop, committer)
        elapsed = time.perf_counter() - start
    return count / elapsed


def crw_rate(path: Path, committers: int, seconds: float) -> float:
    return trio.run(_crw_committers, path, committers, seconds)


def _threaded(committers: int, seconds: float, commit: Callable[[], None]) -> float:
    counts = [0] * committers
    deadline = time.perf_counter() + seconds

    def loop(committer: int) -> None:
        while time.perf_counter() < deadline:
            commit()
            counts[committer] += 1

    threads = [threading.Thread(target=loop, args=(c,)) for c in range(committers)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(counts) / (time.perf_counter() - start)


def naive_rate(path: Path, committers: int, seconds: float) -> float:
    def commit() -> None:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
        try:
            os.write(fd, LINE)
            sync_data(fd)
        finally:
            os.close(fd)

    return _threaded(committers, seconds, commit)


def sqlite_rate(path: Path, committers: int, seconds: float) -> float:
    with _sqlite_connect(path) as db:
        db.execute("CREATE TABLE IF NOT EXISTS journal (seq INTEGER PRIMARY KEY, line TEXT)")
    local = threading.local()
    text = LINE.decode()

    def commit() -> None:
        if not hasattr(local, "db"):
            local.db = _sqlite_connect(path)
        with local.db:
            local.db.execute("INSERT INTO journal (line) VALUES (?)", (text,))

    return _threaded(committers, seconds, commit)


def _sqlite_connect(path: Path) -> sqlite3.Connection:
    db = sqlite3.connect(path, timeout=60, check_same_thread=False)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")
    return db


async def _commit_latencies(path: Path, seconds: float) -> list[float]:
    latencies: list[float] = []
    async with open_journal_writer(path) as journal:
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            start = time.perf_counter()
            await journal.commit([_row(0, len(latencies))])
            latencies.append(time.perf_counter() - start)
    return latencies


def fsync_latencies(path: Path, seconds: float) -> list[float]:
    latencies: list[float] = []
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
    try:
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            start = time.perf_counter()
            os.write(fd, LINE)
            sync_data(fd)
            latencies.append(time.perf_counter() - start)
    finally:
        os.close(fd)
    return latencies


RATES: dict[str, Callable[[Path, int, float], float]] = {
    "rows_per_s": crw_rate,
    "naive_rows_per_s": naive_rate,
    "sqlite_rows_per_s": sqlite_rate,
}


def run(seconds: float, trials: int) -> dict[str, object]:
    repo = Path(__file__).resolve().parent.parent
    samples: dict[str, dict[str, list[float]]] = {k: {} for k in RATES}
    commit_ms: list[float] = []
    fsync_ms: list[float] = []
    with tempfile.TemporaryDirectory(dir=repo, prefix=".bench-journal-") as tmp:
        base = Path(tmp)
        for trial in range(trials):
            for committers in CONCURRENCY:
                for name, rate in RATES.items():
                    path = base / f"{name}-{committers}-{trial}"
                    value = rate(path, committers, seconds)
                    samples[name].setdefault(str(committers), []).append(value)
            lat_seconds = seconds / 2
            commit = trio.run(_commit_latencies, base / f"latency-{trial}", lat_seconds)
            commit_ms.append(statistics.median(commit) * 1e3)
            raw = fsync_latencies(base / f"fsync-{trial}", lat_seconds)
            fsync_ms.append(statistics.median(raw) * 1e3)
    result: dict[str, object] = {
        name: {c: round(statistics.median(v)) for c, v in by_c.items()}
        for name, by_c in samples.items()
    }
    result["commit_latency_ms"] = round(statistics.median(commit_ms), 3)
    result["fsync_latency_ms"] = round(statistics.median(fsync_ms), 3)
    return result


def table(result: dict[str, object]) -> str:
    rows = ["committers  crw rows/s  naive rows/s  sqlite rows/s  crw/sqlite"]
    for c in map(str, CONCURRENCY):
        crw, naive, lite = (result[k][c] for k in RATES)  # type: ignore[index]
        rows.append(f"{c:>10}  {crw:>10}  {naive:>12}  {lite:>13}  {crw / lite:>9.1f}x")
    commit, raw = result["commit_latency_ms"], result["fsync_latency_ms"]
    rows.append(f"one durable commit: {commit} ms; one raw write+fsync: {raw} ms")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--seconds", type=float, default=0.8, help="seconds a trial")
    parser.add_argument("--trials", type=int, default=3, help="trials a figure")
    args = parser.parse_args()
    result = run(args.seconds, args.trials)
    print(json.dumps(result) if args.json else table(result))


if __name__ == "__main__":
    main()
