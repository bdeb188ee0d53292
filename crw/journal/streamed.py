"""A replay of a journal file read a piece at a time, for the run process's snapshot.

A run process leaves the replay snapshot of its journal when it exits
(`crw.journal.snapshot`), so the owner's next command reads only what later
processes append. `replay_journal` decodes the journal whole: for a 10,000-call
run that is every row as a dict at once, tens of MB, the run process's peak
memory. `replay_pieces` folds the same rows a piece of whole batches at a time,
so the rows held at once stay bounded by the piece, whatever the journal's size.
"""

from __future__ import annotations

import marshal
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from crw.journal.framing import FRAMING
from crw.journal.log import JournalRead, decode
from crw.journal.replay import SETTLED_STATES, CallState, DeferredCalls, RunState, replay
from crw.journal.snapshot_pack import SETTLED_CHUNKS, call_values, packed_calls
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


def replay_packed(journal: Path, size: int, piece: int | None = None) -> Replayed:
    """The state `replay_pieces(journal, piece, results=False)` replays, its calls
    kept as the snapshot packs them (`crw.journal.snapshot_pack.packed_calls`), for the
    snapshot a run process leaves: after each piece, the calls it settled leave
    the state as their values, marshalled a pack every `size` / (SETTLED_CHUNKS -
    2) bytes of journal (`size`: the journal's, as the caller found it). So the
    exit never holds a big run's calls as CallStates (some 4 KB a call: 400 MB
    at 100,000 calls), and the snapshot written from the state marshals none of
    them again (it keeps fewer packs than SETTLED_CHUNKS). A row that moves a
    settled call on has them all built again, and packed again from there.

    Raises what `replay_pieces` raises.
    """
    packer = _Packer(size // (SETTLED_CHUNKS - 2) + 1)
    state = RunState()
    end = crc = 0
    for read, data in pieces(journal, piece):
        replay(read.rows, into=state)
        packer.take(state, read.end)
        crc = zlib.crc32(memoryview(data)[: read.end], crc)
        end += read.end
    packer.finish(state)
    return Replayed(state, end, crc)


class _Packer:
    """The calls `replay_packed` took out of its state: `packs` marshalled,
    `pending` not yet; `places` the index of each call still in the state (its
    place among all the calls, in the order their rows first named them)."""

    def __init__(self, pack_bytes: int) -> None:
        self.pack_bytes = pack_bytes
        self.restart()

    def restart(self) -> None:
        self.ids: set[str] = set()
        self.packs: list[bytes] = []
        self.pending: list[list[Any]] = []
        self.places: dict[str, int] = {}
        self.after = 0
        self.since = 0

    def take(self, state: RunState, read_bytes: int) -> None:
        """Take the state's settled calls out of it, each result dropped."""
        deferred = state.deferred_calls()
        if deferred is None:  # the first piece, or a row moved a settled call on
            self.restart()
            opened = state.calls
        else:
            opened = deferred.open
        settled: list[str] = []
        for call_id, call in opened.items():  # the calls the piece added come last
            if call_id not in self.places:
                self.places[call_id] = self.after
                self.after += 1
            call.result = None  # the snapshot keeps none (only a completed row sets one)
            if call.state in SETTLED_STATES:
                settled.append(call_id)
        for call_id in settled:
            self.pending.append([self.places.pop(call_id), call_values(opened.pop(call_id))])
            self.ids.add(call_id)
        self.since += read_bytes
        if self.since >= self.pack_bytes:
            self._pack()
        state.defer_calls(DeferredCalls(opened, self.ids, self._build))

    def _pack(self) -> None:
        if self.pending:
            self.packs.append(marshal.dumps(self.pending))
            self.pending = []
        self.since = 0

    def _build(self, opened: dict[str, CallState]) -> dict[str, CallState]:
        """Every call, in order: those packed or pending built again."""
        places, after = dict(self.places), self.after
        for call_id in opened:  # the calls a replay added since the last piece
            if call_id not in places:
                places[call_id], after = after, after + 1
        packs = (*self.packs, marshal.dumps(self.pending))
        return packed_calls(frozenset(self.ids), packs, opened, places, after).build(opened)

    def finish(self, state: RunState) -> None:
        """Leave the state's calls as a read of the snapshot would: packed."""
        self._pack()
        deferred = state.deferred_calls()
        if deferred is None:  # no call row at all
            return
        ids, packs = frozenset(self.ids), tuple(self.packs)
        state.defer_calls(packed_calls(ids, packs, deferred.open, self.places, self.after))


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
    with store_at(journal).open_pieces() as file:
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
