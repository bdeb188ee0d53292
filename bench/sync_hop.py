"""CPU of one journal sync made three ways: inline on the Trio loop, through the
writer's hop to trio's thread cache (`crw.actors.thread_hop.run_sync`, what the
journal writer does a group), and through a dedicated sync thread fed by a queue.

Each sync writes 600 bytes (a call's group, about) to a scratch file and
`fdatasync`s it, one after the other; the figures are the process's CPU (user +
sys) and wall a sync. Run: `.venv/bin/python bench/sync_hop.py [N]`.
"""

from __future__ import annotations

import collections
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable

import trio

from crw.actors import thread_hop

PAYLOAD = b"x" * 600


class Dedicated:
    """One daemon thread that runs the jobs queued to it, in order, and wakes the
    task that queued each through the Trio token."""

    def __init__(self) -> None:
        self._ready = threading.Condition()
        self._jobs: collections.deque[
            tuple[Callable[[], object], trio.lowlevel.Task, trio.lowlevel.TrioToken]
        ] = collections.deque()
        threading.Thread(target=self._loop, daemon=True).start()

    def _loop(self) -> None:
        while True:
            with self._ready:
                while not self._jobs:
                    self._ready.wait()
                fn, task, token = self._jobs.popleft()
            fn()
            token.run_sync_soon(trio.lowlevel.reschedule, task)

    async def run(self, fn: Callable[[], object]) -> None:
        task, token = trio.lowlevel.current_task(), trio.lowlevel.current_trio_token()
        with self._ready:
            self._jobs.append((fn, task, token))
            self._ready.notify()
        await trio.lowlevel.wait_task_rescheduled(lambda _: trio.lowlevel.Abort.FAILED)


async def measure(kind: str, syncs: int, fd: int) -> str:
    def sync() -> None:
        os.write(fd, PAYLOAD)
        os.fdatasync(fd)

    dedicated = Dedicated()
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(syncs):
        if kind == "thread cache":
            await thread_hop.run_sync(sync)
        elif kind == "dedicated thread":
            await dedicated.run(sync)
        else:
            sync()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return f"{kind:>16}: {cpu / syncs * 1e6:5.0f} us CPU, {wall / syncs * 1e6:5.0f} us wall a sync"


def main() -> None:
    syncs = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    with tempfile.TemporaryDirectory() as where:
        fd = os.open(os.path.join(where, "journal"), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        try:
            for kind in ["inline", "thread cache", "dedicated thread"] * 2:
                print(trio.run(measure, kind, syncs, fd))
        finally:
            os.close(fd)
    print(f"load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
