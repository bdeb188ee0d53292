"""The tests' autojumping clock, which does not jump while a worker thread works.

`trio.testing.MockClock(autojump_threshold=0)` jumps virtual time to the next
timer whenever every task is blocked, and a task waiting on
`trio.to_thread.run_sync` (a journal append, a step file written, a git read)
counts as blocked. The clock then skipped timers while the thread did real work,
and how many it skipped depended on how fast the machine was that moment: a
duration measured on the mock clock (a poll's interval, the 60 s an unreachable
host is given) came out a poll or two longer on a loaded machine. This clock holds
its autojump while a task of its run waits on a worker thread, so a thread's
work takes no virtual time, whatever the load.

Only `trio.to_thread.run_sync` and `crw.actors.thread_hop.run_sync` are watched
(crw's own hops all go through them);
threads of their own (the mock model's HTTP server) and real processes are not:
a test that waits on those waits for a condition, not for a duration.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, TypeVar

import trio
from trio.testing import MockClock

T = TypeVar("T")


def holding_jumps(clock: MockClock, run_sync: Callable[..., Any]) -> Callable[..., Any]:
    """`run_sync` (trio.to_thread's) that turns `clock`'s autojump off while a task
    running under `clock` waits on its thread, and back on (threshold 0) once no
    task does. (MockClock is final: the threshold is its one public handle.)"""
    waiting = 0

    async def held(sync_fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        nonlocal waiting
        if trio.lowlevel.current_clock() is not clock:
            result: T = await run_sync(sync_fn, *args, **kwargs)
            return result
        waiting += 1
        clock.autojump_threshold = math.inf
        try:
            result = await run_sync(sync_fn, *args, **kwargs)
            return result
        finally:
            waiting -= 1
            if waiting == 0:
                clock.autojump_threshold = 0

    return held
