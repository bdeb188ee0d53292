"""Running a test's code under a chosen umask."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from crw.private import umask_takes


@contextlib.contextmanager
def umask_set(value: int) -> Iterator[None]:
    """The process's umask is `value` meanwhile (and read afresh by `umask_takes`)."""
    before = os.umask(value)
    umask_takes.cache_clear()
    try:
        yield
    finally:
        os.umask(before)
        umask_takes.cache_clear()
