"""Counting the journal lines a read decodes, whichever way it reads them."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest

import crw.journal.framing as framing
import crw.journal.log as log


def count_decoded_lines(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """A list that gets a 1 for every journal line decoded from now on: each line
    of whole batches parsed at once, and each line read one at a time."""
    lines: list[int] = []
    whole_line, whole_batches = framing.whole_line, framing.whole_batches

    def one(*args: Any, **kwargs: Any) -> Any:
        lines.append(1)
        return whole_line(*args, **kwargs)

    def batches(pieces: Iterable[bytes | memoryview], after: int) -> Any:
        read = whole_batches(pieces, after)
        lines.extend([1] * (len(read[0]) if read is not None else 0))
        return read

    monkeypatch.setattr(log, "whole_line", one)
    monkeypatch.setattr(log, "whole_batches", batches)
    return lines
