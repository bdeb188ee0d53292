"""crw's journal on PostgreSQL beside DBOS Transact and raw inserts, on one server.

A throwaway PostgreSQL cluster (tests/postgres.py's: initdb in a fresh directory
under /tmp, as `nobody` when run as root, a unix socket; fsync and
synchronous_commit on, the server's defaults) serves every figure of one run:

- commits/s, serial (one committer: each commit waits for the last) and with
  --workers (64) concurrent committers, of
  - `crw`: the journal writer (`open_journal_writer`) of a run whose run.json
    names the database, a commit of one row, what a run's process commits;
    concurrent: --workers Trio tasks committing at once into the writer's group
    commit (one transaction a group);
  - `dbos`: DBOS Transact's steps on its system database in the same cluster
    (bench/pg_dbos.py, run by the DBOS venv's Python: --dbos-python), a step per
    commit;
  - `raw`: one single-row INSERT a commit, each its own transaction, on its own
    connection, `synchronous_commit` on (concurrent: --workers threads, a
    connection each);
- `list_ms`: `crw flow list --db URL --json` (a fresh process, median of --runs)
  of --list-runs (1,000) runs that are in the database only (their run directories
  on another machine): one finished run of 20 calls, imported, its rows and its
  replay snapshot copied under new ids by SQL;
- `status_ms`: `crw flow status RUN --json` of a finished run of --status-calls
  (10,000) calls imported into the database (its snapshot kept there by the first,
  untimed, status); `list_status_load`: the 1-minute load average before and
  after those two, `list_status_quiet` whether it stayed under the core count
  (the wall targets are a quiet machine's; the CPU figures hold under load);
- with --scale N: bench/scale.py's App Server run of N calls on the simulated host,
  the journal in the database (calls_per_s, per_call_ms, flat_ratio against 1,000).

`machine` is bench/machine.py's yardstick and the load average, before and after.

    .venv/bin/python bench/pg.py [--commits N] [--workers N] [--dbos-python PY]
        [--list-runs N] [--status-calls N] [--scale N] [--runs N] [--json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psycopg
import trio

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from cli import finished_run, measure  # noqa: E402
from machine import speed  # noqa: E402

from crw.actors.journal_writer import open_journal_writer  # noqa: E402
from crw.journal.rows import Started  # noqa: E402
from crw.journal.stores import DB_MEMBER  # noqa: E402
from tests.postgres import find_binaries, throwaway_cluster  # noqa: E402

ROW = Started.model_validate({"call": "c1", "text": "x" * 200})
"""The row each crw commit writes: a journal row of about a real one's size."""


def database(cluster_url: str, name: str) -> str:
    with psycopg.connect(cluster_url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}".encode())
    return cluster_url.replace("/postgres?", f"/{name}?")


def run_dir(root: Path, run: str, url: str) -> Path:
    run_root = root / run
    run_root.mkdir(parents=True)
    (run_root / "run.json").write_text(json.dumps({"id": run, DB_MEMBER: url}))
    return run_root / "journal.jsonl"


async def crw_commits(journal: Path, serial: int, workers: int, each: int) -> dict[str, float]:
    """Commits/s of the journal writer: one committer, then `workers` at once."""
    async with open_journal_writer(journal) as writer:
        for _ in range(10):
            await writer.commit([ROW])  # warm: the run taken, the statement prepared
        began = time.perf_counter()
        for _ in range(serial):
            await writer.commit([ROW])
        serial_rate = serial / (time.perf_counter() - began)

        async def committer() -> None:
            for _ in range(each):
                await writer.commit([ROW])

        began = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for _ in range(workers):
                nursery.start_soon(committer)
        concurrent_rate = workers * each / (time.perf_counter() - began)
    return {"serial_commits_per_s": round(serial_rate, 1),
            "concurrent_commits_per_s": round(concurrent_rate, 1)}  # fmt: skip


def raw_commits(url: str, serial: int, workers: int, each: int) -> dict[str, float]:
    """Commits/s of single-row inserts, each its own transaction, synchronous_commit on."""
    line = ROW.model_dump_json().encode()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(b"CREATE TABLE raw (run text, seq bigint, line bytea, PRIMARY KEY (run, seq))")

    def insert(conn: psycopg.Connection[Any], run: str, count: int) -> None:
        for seq in range(count):
            conn.execute(b"INSERT INTO raw VALUES (%s, %s, %s)", (run, seq, line))

    def connect() -> psycopg.Connection[Any]:
        return psycopg.connect(url, autocommit=True, options="-c synchronous_commit=on")

    with connect() as conn:
        insert(conn, "warm", 10)
        began = time.perf_counter()
        insert(conn, "serial", serial)
        serial_rate = serial / (time.perf_counter() - began)
    conns = [connect() for _ in range(workers)]
    try:
        gate = threading.Barrier(workers + 1)

        def worker(n: int) -> None:
            gate.wait()
            insert(conns[n], f"w{n}", each)

        threads = [threading.Thread(target=worker, args=(n,)) for n in range(workers)]
        for thread in threads:
            thread.start()
        gate.wait()
        began = time.perf_counter()
        for thread in threads:
            thread.join()
        concurrent_rate = workers * each / (time.perf_counter() - began)
    finally:
        for conn in conns:
            conn.close()
    return {"serial_commits_per_s": round(serial_rate, 1),
            "concurrent_commits_per_s": round(concurrent_rate, 1)}  # fmt: skip


def dbos_commits(python: str, url: str, serial: int, workers: int, each: int) -> dict[str, Any]:
    argv = [python, str(REPO / "bench" / "pg_dbos.py"), url, "--serial", str(serial)]
    argv += ["--workers", str(workers), "--each", str(each)]
    out = subprocess.run(argv, check=True, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    found: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return found


def crw_env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CRW_", "PYTHONDONTWRITE"))}
    return env | {"PYTHONPATH": str(REPO), "PYTHONPYCACHEPREFIX": str(tmp / "pyc")}


def crw_flow(tmp: Path, *args: str) -> None:
    argv = [sys.executable, "-m", "crw", "flow", *args]
    subprocess.run(argv, check=True, env=crw_env(tmp), stdin=subprocess.DEVNULL,
                   stdout=subprocess.DEVNULL)  # fmt: skip


def imported_run(tmp: Path, name: str, calls: int, url: str) -> tuple[Path, str]:
    """A finished App Server run of `calls` instant calls, its journal moved into
    the database: its state directory and id."""
    state = tmp / name / "state"
    run_id = finished_run(state, calls)
    crw_flow(tmp, "import", run_id, "--db", url, "--state", str(state))
    return state, run_id


def copy_runs(url: str, run_id: str, count: int) -> None:
    """`count` copies of the run's rows and replay snapshot under new ids, by SQL."""
    ids = [f"cold-20261130-{n // 3600:02d}{n // 60 % 60:02d}{n % 60:02d}-{n:04x}"
           for n in range(count)]  # fmt: skip
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            b"INSERT INTO crw_journal SELECT c, seq, at_byte, line FROM crw_journal, "
            b"unnest(%s::text[]) AS c WHERE run = %s",
            (ids, run_id),
        )
        conn.execute(
            b"INSERT INTO crw_snapshots SELECT c, last_seq, end_byte, snapshot, summary "
            b"FROM crw_snapshots, "
            b"unnest(%s::text[]) AS c WHERE run = %s",
            (ids, run_id),
        )
        conn.execute(b"DELETE FROM crw_journal WHERE run = %s", (run_id,))
        conn.execute(b"DELETE FROM crw_snapshots WHERE run = %s", (run_id,))
        conn.execute(b"VACUUM ANALYZE crw_journal")


def list_and_status(tmp: Path, url: str, list_runs: int, status_calls: int, runs: int
                    ) -> dict[str, Any]:  # fmt: skip
    """`list --db` of `list_runs` runs in the database only, `status` of a
    `status_calls`-call run in it."""
    listed_state, listed_id = imported_run(tmp, "list", 20, url)
    crw_flow(tmp, "status", listed_id, "--state", str(listed_state), "--json")  # its snapshot
    copy_runs(url, listed_id, list_runs)
    shutil.rmtree(listed_state / "flow" / listed_id)  # every run another machine's
    big_state, big_id = imported_run(tmp, "big", status_calls, url)
    env = crw_env(tmp)
    flow = [sys.executable, "-m", "crw", "flow"]
    timed = {
        "list": ([*flow, "list", "--all", "--db", url, "--state", str(listed_state), "--json"],
                 env),
        "status": ([*flow, "status", big_id, "--state", str(big_state), "--json"], env),
    }  # fmt: skip
    before = os.getloadavg()[0]
    figures: dict[str, Any] = measure(timed, runs, tmp)
    load = [round(before, 2), round(os.getloadavg()[0], 2)]
    # The wall targets are a quiet machine's: under load the wall is the load's.
    quiet = max(load) < (os.cpu_count() or 1)
    return figures | {"list_runs": list_runs, "status_calls": status_calls,
                      "list_status_load": load, "list_status_quiet": quiet}  # fmt: skip


def scale(url: str, calls: int, tmp: Path) -> dict[str, Any]:
    from scale import LIMIT, run_backend

    with contextlib.ExitStack() as kept:
        return run_backend("app-server", sorted({1000, calls}), LIMIT, tmp, kept, db=url)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--commits", type=int, default=2000, help="serial commits")
    parser.add_argument("--workers", type=int, default=64)
    parser.add_argument("--each", type=int, default=100, help="commits of each concurrent one")
    parser.add_argument("--dbos-python", default=str(REPO / ".venv-dbos" / "bin" / "python"))
    parser.add_argument("--list-runs", type=int, default=1000)
    parser.add_argument("--status-calls", type=int, default=10000)
    parser.add_argument("--scale", type=int, default=0, help="App Server calls (0: none)")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--only", default="commits,list,scale")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    binaries = find_binaries()
    if binaries is None:
        parser.error("PostgreSQL's initdb, pg_ctl and postgres are not installed (make postgres)")
    only = set(args.only.split(","))
    figures: dict[str, Any] = {"machine_before": speed()}
    with (
        tempfile.TemporaryDirectory(prefix="crw-bench-pg-") as tmp_name,
        throwaway_cluster(binaries) as cluster,
    ):
        tmp = Path(tmp_name)
        counts = (args.commits, args.workers, args.each)
        if "commits" in only:
            journal = run_dir(tmp / "runs", "bench-commits", database(cluster.url(), "crw"))
            figures["crw"] = trio.run(crw_commits, journal, *counts)
            figures["raw"] = raw_commits(database(cluster.url(), "raw"), *counts)
            if Path(args.dbos_python).exists():
                figures["dbos"] = dbos_commits(
                    args.dbos_python, database(cluster.url(), "dbos"), *counts
                )
            else:
                figures["dbos"] = {"skipped": f"{args.dbos_python} missing (make bench-pg)"}
        if "list" in only:
            url = database(cluster.url(), "runs")
            figures |= list_and_status(tmp, url, args.list_runs, args.status_calls, args.runs)
        if "scale" in only and args.scale:
            figures["app_server"] = scale(database(cluster.url(), "scale"), args.scale, tmp)
    figures["machine_after"] = speed()
    print(json.dumps(figures, indent=None if args.json else 2))


if __name__ == "__main__":
    main()
