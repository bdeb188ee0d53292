"""How fast this machine is right now, so figures taken on different days compare.

The shared machine's speed moves from day to day (the same tree ran the session
bench at 97-121 calls/s one night and 53-75 the next morning, both quiet): a
benchmark's figure alone does not say whether the code or the machine changed.
`speed()` times a fixed pure-Python loop on one core (the best of three, so a
moment's preemption does not count) and reads the load average; the benches print
it beside their figures.

    .venv/bin/python bench/machine.py [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import time

LOOP = 5_000_000
"""Additions timed: ~0.3-1 s of one core here."""


def _loop() -> float:
    start = time.perf_counter()
    total = 0
    for i in range(LOOP):
        total += i
    assert total == LOOP * (LOOP - 1) // 2
    return time.perf_counter() - start


def speed() -> dict[str, float | int | None]:
    """`loop_ms`: the fixed loop's best of three (lower is a faster core);
    `load`: the 1-minute load average before it; `cores`: os.cpu_count()."""
    load = os.getloadavg()[0]
    best = min(_loop() for _ in range(3))
    return {"loop_ms": round(best * 1000, 1), "load": round(load, 2), "cores": os.cpu_count()}


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    figures = speed()
    if args.json:
        print(json.dumps(figures))
    else:
        print(
            f"loop {figures['loop_ms']} ms (best of 3), load {figures['load']}, "
            f"{figures['cores']} cores"
        )


if __name__ == "__main__":
    main()
