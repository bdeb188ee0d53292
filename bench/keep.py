"""Where a bench's state directories go, and whether it removes them (`state_tempdir`)."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

KEEP_ENV = "CRW_BENCH_KEEP"
"""Set (by `bench/targets.py`): a bench leaves its state directories where they are,
for its caller to remove once every bench has run. On this machine's file system a
removal of thousands of files slows every create near them for up to 360 s after
(docs/performance.md, "A quiet run"), so a bench that removed its files would
slow the benches after it."""


def state_tempdir(prefix: str, where: Path | None = None) -> contextlib.AbstractContextManager[str]:
    """A new directory under `where` (the system's temp directory: None), removed
    when the block ends, or left there when `KEEP_ENV` is set."""
    if os.environ.get(KEEP_ENV):
        return contextlib.nullcontext(tempfile.mkdtemp(prefix=prefix, dir=where))
    return tempfile.TemporaryDirectory(prefix=prefix, dir=where)
