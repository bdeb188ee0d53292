"""A replay of a journal file read a piece at a time, for the run process's snapshot.

A run process leaves the replay snapshot of its journal when it exits
(`crw.journal.snapshot`), so the owner's next command reads only what later
processes append. `replay_journal` decodes the journal whole: for a 10,000-call
run that is every row as a dict at once, tens of MB, the run process's peak
memory. `replay_pieces` folds the same rows a piece of whole batches at a time,
so the rows held at once stay bounded by the piece, whatever the journal's size.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from crw.journal.framing import FRAMING
from crw.journal.log import JournalRead, decode
from crw.journal.replay import RunState, replay
from crw.journal.stores import store_at

PIECE = 1 << 20
"""Bytes read at a time (a piece grows until it holds a whole batch)."""

_SEQ_HEAD = b'{"seq":'
_FRAMING_HEAD = b'"%s":' % FRAMING.encode()


@dataclass(frozen=True)
class Replayed:
    """The state the journal's first `end` bytes replay to, and their CRC-32."""

    state: RunState
    end: int
    crc: int


def replay_pieces(journal: Path, piece: int | None = None, *, results: bool = True) -> Replayed:
    """Replay `journal` a piece of whole batches at a time (`piece` bytes and more,
    PIECE by default): the same state as a replay of its whole batches read at
    once. Reading stops at a torn tail. Without `results`, no call keeps its
    result (a snapshot keeps none, and a big run's results are most of its rows):
    the state is then the snapshot's, `result` aside the same (replay reads no
    call's result back).

    Raises:
        OSError: the journal cannot be read.
        JournalCorruptError: the journal is damaged (not a torn tail).
    """
    state = RunState()
    end = crc = 0
    for read, data in pieces(journal, piece):
        replay(read.rows, into=state)
        if not results:
            for row in read.rows:
                done = row.get("row") == "completed"
                call = state.calls.get(str(row.get("call"))) if done else None
                if call is not None:
                    call.result = None
        crc = zlib.crc32(memoryview(data)[: read.end], crc)
        end += read.end
    return Replayed(state, end, crc)


def pieces(journal: Path, piece: int | None = None) -> Iterator[tuple[JournalRead, bytes]]:
    """The journal's whole batches a piece at a time (`piece` bytes and more, PIECE
    by default), each piece's read and its bytes (the read's offsets are the
    piece's); the rows held at once stay bounded by the piece. Reading stops at a
    torn tail.

    Raises:
        OSError: the journal cannot be read.
        JournalCorruptError: the journal is damaged (not a torn tail).
    """
    size = piece or PIECE
    last_seq = 0
    with store_at(journal).open_bytes() as file:
        pending = b""
        while True:
            more = file.read(size)
            data = pending + more
            if not data:
                return
            cut = batches_end(data) if more else len(data)
            if more and cut == 0:  # no batch closes in it yet: read on
                pending = data
                continue
            read = decode(data[:cut], journal, after=last_seq)
            last_seq = read.last_seq
            yield read, data
            if not more or read.torn is not None:
                return
            pending = data[cut:]


def batches_end(data: bytes) -> int:
    """The offset just past the last line of `data` that closes a batch (its seq
    is its commit_seq), by the framing members alone; 0 when none does."""
    stop = data.rfind(b"\n")
    while stop >= 0:
        start = data.rfind(b"\n", 0, stop) + 1
        if _closes(data[start:stop]):
            return stop + 1
        stop = start - 1
    return 0


def _closes(line: bytes) -> bool:
    if not line.startswith(_SEQ_HEAD):
        return False
    at = line.rfind(_FRAMING_HEAD)
    seq, framing = line[len(_SEQ_HEAD) : line.find(b",")], line[at + len(_FRAMING_HEAD) :]
    framing = framing[: framing.find(b",")] if b"," in framing else framing.rstrip(b"}")
    return at > 0 and seq.isdigit() and seq == framing
