"""The harvest decision with its schema check off the run's event loop.

`harvest.decide` checks the answer against its schema, which may take up to
CHECK_SECONDS of CPU (crw.engine.answers.schema_check bounds it with its thread's CPU
time): on the loop, the run would answer nothing meanwhile, not even a pause.
Nearly every check takes microseconds, and a worker-thread hop costs the loop
more than that: so the check is tried on the loop within ON_LOOP_SECONDS, and
only one that needs longer is done again, in a worker thread, with its whole
budget.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import trio

from crw.engine.answers import harvest
from crw.host.protocol import Turn
from crw.journal.rows import NullModel, Tokens

ON_LOOP_SECONDS = 0.02
"""The CPU a check may take on the event loop before it moves to a worker thread."""


async def decide(
    call: str,
    schema: Mapping[str, Any],
    turn: Turn,
    tokens: Tokens,
    *,
    repaired: bool,
    attempt: int,
    k: int | None,
    max_bytes: int | None = None,
) -> harvest.CallEnd:
    """`harvest.decide` of the ended turn, on the loop when its check is quick,
    else in a worker thread."""
    decide = functools.partial(
        harvest.decide,
        call,
        schema,
        turn,
        tokens,
        repaired=repaired,
        attempt=attempt,
        k=k,
        max_bytes=max_bytes,
    )
    end = decide(check_seconds=ON_LOOP_SECONDS)
    if isinstance(end.row, NullModel) and end.row.reason == "schema_check_timed_out":
        end = await trio.to_thread.run_sync(decide)
    return end
