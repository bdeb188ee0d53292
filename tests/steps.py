"""Counting the work a piece of code does, to pin its complexity without timing it.

`count_lines(modules)` counts the Python lines executed inside the named modules
(a loop's body or a comprehension counts once per pass), so a quadratic path shows
as a count that grows with the square of the input, however fast the machine is.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import FrameType, ModuleType
from typing import Any


@dataclass
class Lines:
    """The lines counted so far."""

    n: int = 0


@contextmanager
def count_lines(*modules: ModuleType) -> Iterator[Lines]:
    """Count the lines executed in `modules` while the block runs (this thread)."""
    files = {module.__file__ for module in modules}
    lines = Lines()

    def local(frame: FrameType, event: str, arg: Any) -> Any:
        if event == "line":
            lines.n += 1
        return local

    def tracer(frame: FrameType, event: str, arg: Any) -> Any:
        return local if frame.f_code.co_filename in files else None

    previous = sys.gettrace()
    sys.settrace(tracer)
    try:
        yield lines
    finally:
        sys.settrace(previous)
