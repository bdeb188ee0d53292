"""A worker-thread hop for a task that has one call in flight at a time.

`trio.to_thread.run_sync` acquires its capacity limiter first, and that acquire
is a schedule point of its own: the task is resumed once before the thread starts
and once when it is done. The journal writer hops once a group (its sync) and
never has two in flight, so it needs no limiter: `run_sync` here starts the
thread at once, and the task is resumed once, with the result (bench/scale.py's
App Server run, 1,000 calls: the writer's resumes 3.0 -> 1.2 a call together with
its requests taken without a wait).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from typing import Any, TypeVar

import trio

T = TypeVar("T")


async def run_sync(fn: Callable[..., T], *args: Any) -> T:
    """`fn(*args)` in a worker thread (trio's thread cache, as to_thread's), its
    result or exception returned. Not abandoned on cancel: a cancelled task waits
    for the call it started, as `to_thread.run_sync` does by default."""
    await trio.lowlevel.checkpoint_if_cancelled()
    task, token = trio.lowlevel.current_task(), trio.lowlevel.current_trio_token()

    def deliver(result: Any) -> None:  # an outcome.Outcome, in the worker thread
        with contextlib.suppress(trio.RunFinishedError):
            token.run_sync_soon(trio.lowlevel.reschedule, task, result)

    trio.lowlevel.start_thread_soon(functools.partial(fn, *args), deliver)
    result: T = await trio.lowlevel.wait_task_rescheduled(lambda _: trio.lowlevel.Abort.FAILED)
    return result
