"""A synthetic journal written as the journal writer frames it, for the benches
that read one back (replay.py, large_answer.py)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

from crw.journal.log import encode_batch, encode_body
from crw.journal.rows import RowModel


def write_batches(path: Path, batches: Iterable[Sequence[RowModel]], at: str) -> int:
    """Write `batches` to `path`, each a batch as the writer commits it, their rows
    numbered from seq 1 and all stamped `at`. Returns the number of rows written."""
    seq = 1
    with path.open("wb") as file:
        for batch in batches:
            file.write(encode_batch(seq, at, [encode_body(row) for row in batch]))
            seq += len(batch)
    return seq - 1
