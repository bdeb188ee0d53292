"""A turn's rollout read for its token total, in the loop's thread when it is small.

Owns when a rollout is read without a worker-thread hop (INLINE_ROLLOUT). What a
rollout's total is, is `crw.engine.answers.outcome.read_rollout_total`'s to say;
this module never parses a rollout, nor writes a row.
"""

from __future__ import annotations

import os
from pathlib import Path

import trio

from crw.engine.answers import outcome
from crw.journal.rows import Tokens

INLINE_ROLLOUT = 64 * 1024
"""A rollout up to this size (bytes) is read in the loop's thread: a stat, an open
and a read of a file the host has just written, where a worker-thread hop costs
the loop its scheduling and hand-off; a larger one (a long turn's) is read in a
worker thread, as every one was."""


async def rollout_total(path: Path) -> Tokens | None:
    """`outcome.read_rollout_total(path)`, in the loop's thread when it is small."""
    try:
        small = os.stat(path).st_size <= INLINE_ROLLOUT
    except OSError:  # none to read: read_rollout_total answers None at once
        small = True
    if small:
        return outcome.read_rollout_total(path)
    return await trio.to_thread.run_sync(outcome.read_rollout_total, path)
