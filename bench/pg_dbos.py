"""DBOS Transact's step commits on a PostgreSQL system database, for bench/pg.py.

Run with the Python of the bench's DBOS venv (`make bench-pg` makes it from
bench/requirements-dbos.txt; never crw's own venv). A DBOS step's output is
recorded in its system database as the step returns, one transaction: the
commit this counts, a step per commit. Serial: one workflow of --serial steps;
concurrent: --workers workflows at once (threads, as DBOS runs synchronous
workflows), --each steps each. Each step returns a small string, the size of a
journal row's. Prints {"serial_commits_per_s", "concurrent_commits_per_s",
"dbos_version"} as JSON.

    python bench/pg_dbos.py URL [--serial N] [--workers N] [--each N]
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from importlib.metadata import version

from dbos import DBOS, DBOSConfig


@DBOS.step()
def step(n: int) -> str:
    return f"row {n:08d} " + "x" * 200


@DBOS.workflow()
def steps(count: int) -> int:
    for n in range(count):
        step(n)
    return count


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("--serial", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=64)
    parser.add_argument("--each", type=int, default=100)
    args = parser.parse_args()
    config: DBOSConfig = {
        "name": "crw-bench",
        "system_database_url": args.url,
        "sys_db_pool_size": args.workers + 8,
        "log_level": "WARNING",
    }
    DBOS(config=config)
    DBOS.launch()
    try:
        steps(10)  # warm: the tables made, the statements prepared
        began = time.perf_counter()
        steps(args.serial)
        serial = args.serial / (time.perf_counter() - began)
        gate = threading.Barrier(args.workers + 1)

        def worker() -> None:
            gate.wait()
            steps(args.each)

        threads = [threading.Thread(target=worker) for _ in range(args.workers)]
        for thread in threads:
            thread.start()
        gate.wait()
        began = time.perf_counter()
        for thread in threads:
            thread.join()
        concurrent = args.workers * args.each / (time.perf_counter() - began)
    finally:
        DBOS.destroy()
    print(
        json.dumps(
            {
                "serial_commits_per_s": round(serial, 1),
                "concurrent_commits_per_s": round(concurrent, 1),
                "dbos_version": version("dbos"),
            }
        )
    )


if __name__ == "__main__":
    main()
