"""A replayed run kept beside its journal, so the owner's commands stay fast on big runs.

`status` and `next` read a run cold, in a new process, every time. A journal of
10,000 calls is tens of MB: decoding all of it costs seconds, its replay little.
`replay_journal` keeps the state a replay of the journal's first `end` bytes
left in `<run>/replay.snapshot` (private, replaced atomically; `marshal`, which
reads back several times faster than JSON, of the plain values replay holds,
behind a CRC-32 of those bytes, so a damaged snapshot is never unmarshalled) and,
while the snapshot is good, decodes and folds only the rows appended after it.
The calls are marshalled apart, inside it, in two packs: the settled ones
(`SETTLED_STATES`: completed, skipped, ...; most calls of a big run) are
unmarshalled and built only when the state's `calls` is first read, or a row after
the snapshot names one (`RunState.defer_calls`); the others are built at once, a
replay folds on into them. The settled pack is a few pieces: a snapshot written
from a snapshot's state keeps its pieces and adds the calls settled since as one
more (`SETTLED_CHUNKS`), so a reader's write costs the open calls, not all.
`next` of a live run builds only the calls not settled (a pool's worth), `next` of
an ended one none, `status` all.

The journal stays the one truth: the snapshot is thrown away and the journal read
whole when it does not match, byte for byte, the journal's first `end` bytes (its
CRC-32 over them, so a journal damaged since is read whole and reported as ever),
when it was written by another crw or Python (its format, the interpreter's tag,
and the fields of a call, differ) or cannot be read. A reader writes it after it
decoded a sixteenth of the journal beyond the one it found (at least 64 KiB, at
most 256 KiB: a journal under 64 KiB is read whole, it is fast) or after it read a
run that ended (its journal grows no more: the next reads decode no row), and never
fails for it: a run directory it cannot write is read whole next time.

A store that is no file keeps the snapshot itself (`JournalStore.keep_snapshot`:
PostgreSQL's `crw_snapshots`, read with the rows after it in one query), so a
run is read from its tail on any machine. Its rows are inserted once and never
changed: the snapshot is taken where the row it ends at is there and ends where
it does, and the rows after it go on from its last seq (no CRC read of the bytes
before it, which would read the journal whole).
"""

from __future__ import annotations

import io
import logging
import marshal
import os
import sys
import zlib
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from crw.journal.file_store import FileJournal
from crw.journal.framing import paused_gc
from crw.journal.log import JournalCorruptError, JournalRead, decode
from crw.journal.replay import SETTLED_STATES, CallState, DeferredCalls, RunState, replay
from crw.journal.run_summary import summary_of
from crw.journal.stores import store_at

log = logging.getLogger("crw.journal")

SNAPSHOT = "replay.snapshot"
FORMAT = f"crw-replay-snapshot/5 {sys.implementation.cache_tag}"
REFRESH_BYTES = 256 << 10
"""The most journal bytes beyond the snapshot a reader decodes before it writes one."""
REFRESH_MIN = 64 << 10
"""The fewest: a journal under this size is read whole (it is fast)."""
REFRESH_SHARE = 16
"""Between the two, a reader writes one once the bytes beyond it are this share
of the journal. A write costs in proportion to the run's calls (the file is
written whole; the settled calls are not marshalled again, `SETTLED_CHUNKS`), a
read in proportion to the bytes beyond it. Measured with the owner's reads
(bench/next_read.py): at 1,000 calls a sixteenth (~100 rows a read, a write in
nine reads) cost less than a sixty-fourth (~45 rows, a write in four); at
10,000 calls the cap of 256 KiB (~215 rows, a write in twelve) less than 1 MiB
(~580 rows, a write in twenty-five)."""

_CALL_FIELDS = [f.name for f in fields(CallState) if f.name != "result"]
"""A call's fields the snapshot keeps: all but its result, which can be large and
which the commands do not show (a process that needs results replays the journal)."""
SETTLED_CHUNKS = 16
"""The most pieces the settled calls are kept in: a snapshot written from a
snapshot's state adds the calls settled since as one more piece, without
unmarshalling the others (a write then costs the open calls, not all); with more
pieces than this they are packed again as one."""
_RUN_FIELDS = [f.name for f in fields(RunState) if f.name != "calls"]
_SEAL = 9
"""The file starts with the CRC-32 of the rest, as eight hex digits and a newline.
The rest is the marshalled head (`_head`), then the settled calls' pieces as they
are (marshalled lists, their lengths in the head): written apart from the head, a
big run's pieces (tens of MB at 100,000 calls) are never copied into one payload."""


@dataclass(frozen=True)
class Snapshot:
    """The state the journal's first `end` bytes replay to; `crc` is theirs."""

    end: int
    crc: int
    state: RunState


def replay_journal(journal: Path, *, live: bool = False) -> tuple[RunState, JournalRead]:
    """The run's state and the read of the journal's rows after the snapshot (all
    of them without one): `end` and `last_seq` are the whole journal's. A call the
    snapshot holds has no `result` (see `_CALL_FIELDS`). A torn tail is warned
    about unless the run is `live` (a process holds it): then it is the batch
    that process is writing this moment, no fault of the journal's.

    Raises what `crw.journal.log.read_journal` raises (damage after the snapshot
    is reported with the whole journal's offsets).
    """
    fold, read = read_fold(journal, live=live)
    return fold.state, read


@dataclass
class Fold:
    """A journal's replay a reader keeps to fold on what the journal appends:
    `state` is the replay of the journal's first `end` bytes, `crc` their CRC-32,
    `saved` the end of the snapshot it was read from or last wrote (a reader
    writes one when the bytes beyond it reach the refresh share, as
    `replay_journal` does)."""

    state: RunState
    end: int
    crc: int
    saved: int


def read_fold(journal: Path, *, live: bool = False) -> tuple[Fold, JournalRead]:
    """`replay_journal`'s read, as a `Fold` to fold on with `fold_on`."""
    store = store_at(journal)
    kept = store.snapshot_tail()
    if kept is not None:
        snapshot, data, tail = _kept_tail(journal, kept)
    else:
        snapshot, data, tail = _file_tail(journal, store.open_bytes())
    if tail.torn is not None and not live:
        log.warning("%s", tail.torn.message)
    start = snapshot.end if snapshot is not None else 0
    state = replay(tail.rows, into=snapshot.state if snapshot is not None else None)
    read = JournalRead(tail.rows, start + tail.end, tail.last_seq, tail.torn)
    # The CRC of the bytes read goes on from the snapshot's, which covers those before.
    crc = zlib.crc32(memoryview(data)[: tail.end], snapshot.crc if snapshot else 0)
    fold = Fold(state, read.end, crc, start)
    _refresh(journal, fold)
    return fold, read


def _file_tail(
    journal: Path, file: io.BufferedIOBase
) -> tuple[Snapshot | None, bytes, JournalRead]:
    """The snapshot beside the journal, when it matches the journal's bytes, and
    the bytes after it (all of them without one): the bytes decoded and their rows."""
    with file:
        snapshot = _load(journal.parent / SNAPSHOT, file)
        if snapshot is not None:
            file.seek(snapshot.end)
            data = file.read()
            try:
                return snapshot, data, decode(data, journal, after=snapshot.state.last_seq)
            except JournalCorruptError:
                pass  # the damage is reported with the whole journal's offsets
        file.seek(0)
        data = file.read()
    return None, data, decode(data, journal)


def _kept_tail(
    journal: Path, kept: tuple[bytes | None, int, bytes]
) -> tuple[Snapshot | None, bytes, JournalRead]:
    """A store's snapshot and its bytes after it (`JournalStore.snapshot_tail`):
    the snapshot, the bytes decoded and their rows. The store checked that the
    snapshot ends at its row's end (its rows are never changed); one that is not
    this crw's, or whose rows after it do not go on from it, is not taken, and
    the journal is read whole."""
    sealed, start, data = kept
    snapshot = parse_snapshot(sealed) if sealed is not None else None
    if snapshot is not None and snapshot.end == start:
        try:
            return snapshot, data, decode(data, journal, after=snapshot.state.last_seq)
        except JournalCorruptError:
            pass  # the damage is reported with the whole journal's offsets
    if start:
        data = store_at(journal).read_from(0)
    return None, data, decode(data, journal)


def fold_on(journal: Path, fold: Fold, data: bytes) -> JournalRead:
    """Fold the journal's bytes after `fold.end`, `data`, into `fold` (its whole
    batches: a torn tail is left for the next read); the read's offsets are
    `data`'s. Writes the snapshot when the bytes beyond it reach the refresh
    share, as `replay_journal` does.

    Raises:
        JournalCorruptError: `data` is damaged (`fold` is left as it was).
    """
    read = decode(data, journal, after=fold.state.last_seq)
    replay(read.rows, into=fold.state)
    fold.crc = zlib.crc32(memoryview(data)[: read.end], fold.crc)
    fold.end += read.end
    _refresh(journal, fold, rebase=True)
    return read


def _refresh(journal: Path, fold: Fold, *, rebase: bool = False) -> None:
    """Write the snapshot of `fold` once the bytes beyond the last one are a
    refresh share of the journal (REFRESH_SHARE), or the run ended beyond it;
    with `rebase`, the fold's settled calls are then kept packed (`_rebase`)."""
    beyond = fold.end - fold.saved
    refresh = min(REFRESH_BYTES, max(REFRESH_MIN, fold.end // REFRESH_SHARE))
    if beyond >= refresh or (beyond and fold.state.state == "ended"):
        pack = _save(journal, fold.state, fold.end, fold.crc)
        fold.saved = fold.end
        if rebase:
            _rebase(fold.state, pack)


CRC_PIECE = 1 << 18
"""The bytes `crc_of` reads at a time, into one buffer."""


def _load(path: Path, journal: io.BufferedIOBase) -> Snapshot | None:
    """The snapshot, when it is this crw's and matches the journal's bytes."""
    snapshot = peek_snapshot(path)
    if snapshot is None or snapshot.end > journal.seek(0, io.SEEK_END):
        return None
    if crc_of(journal, snapshot.end) != snapshot.crc:
        return None
    return snapshot


def crc_of(journal: io.BufferedIOBase, end: int) -> int | None:
    """The CRC-32 of the journal's first `end` bytes (None: it has fewer), read a
    piece at a time into one buffer: the journal under a snapshot is most of a
    big run's, and is not kept (a new buffer of its size costs a page fault per
    page, more than the copy)."""
    buffer = bytearray(min(CRC_PIECE, end))
    view = memoryview(buffer)
    crc, done = 0, 0
    journal.seek(0)
    while done < end:
        got = journal.readinto(view[: min(CRC_PIECE, end - done)])
        if not got:
            return None
        crc = zlib.crc32(view[:got], crc)
        done += got
    return crc


def peek_snapshot(path: Path) -> Snapshot | None:
    """The snapshot at `path` when it is this crw's and whole, unchecked against
    the journal (a reader that checks less: `crw flow list`)."""
    try:
        raw = path.read_bytes()
    except OSError:
        return None
    return parse_snapshot(raw)


def parse_snapshot(raw: bytes) -> Snapshot | None:
    """The snapshot whose sealed bytes are `raw` (as its file holds them) when it is
    this crw's and whole, unchecked against the journal."""
    try:
        body = memoryview(raw)[_SEAL:]  # not a copy: a big run's snapshot is megabytes
        if raw[:_SEAL] != b"%08x\n" % zlib.crc32(body):
            return None  # damaged or cut short: marshal must never read such bytes
        head, end, crc, call_fields, run, (ids, lengths, opened, after) = marshal.loads(body)
        if head != FORMAT or call_fields != _CALL_FIELDS:
            return None
        state = RunState(**run)
        if type(ids) is not list:
            return None
        packed = _Packed(frozenset(ids), _pieces(body, lengths), opened, after)
        with paused_gc():
            opened = {values[0]: _call(values) for _, values in marshal.loads(packed.open)}
    except (ValueError, TypeError, EOFError, KeyError, IndexError, AttributeError):
        return None
    state.defer_calls(DeferredCalls(opened, packed.settled_ids, packed.build, packed))
    return Snapshot(end, crc, state)


def _pieces(body: memoryview, lengths: list[int]) -> tuple[bytes, ...]:
    """The settled pieces at the end of a snapshot's `body`, of `lengths` bytes each."""
    if type(lengths) is not list or any(type(n) is not int or n < 0 for n in lengths):
        raise TypeError("a snapshot's pieces are not listed as this crw lists them")
    at = len(body) - sum(lengths)
    if at < 0:
        raise ValueError("a snapshot's pieces are longer than it")
    pieces = []
    for n in lengths:
        pieces.append(bytes(body[at : at + n]))
        at += n
    return tuple(pieces)


@dataclass(frozen=True)
class _Packed:
    """A snapshot's calls: each piece of `settled`, and `open`, is a marshalled
    list of `[index, values]` (`index`: the call's place among the calls,
    `values`: its `_CALL_FIELDS`), `settled_ids` the settled calls, `after` an
    index past all."""

    settled_ids: frozenset[str]
    settled: tuple[bytes, ...]
    open: bytes
    after: int

    def __post_init__(self) -> None:
        if type(self.settled_ids) is not frozenset or type(self.settled) is not tuple:
            raise TypeError("a snapshot's calls are not packed as this crw packs them")
        if any(type(piece) is not bytes for piece in self.settled):
            raise TypeError("a snapshot's calls are not packed as this crw packs them")
        if type(self.open) is not bytes or type(self.after) is not int:
            raise TypeError("a snapshot's calls are not packed as this crw packs them")

    def places(self) -> dict[str, int]:
        """Each open call's index."""
        return {values[0]: index for index, values in marshal.loads(self.open)}

    def build(self, opened: dict[str, CallState]) -> dict[str, CallState]:
        """All the calls in their order: the settled ones built from their values
        (bytes this crw marshalled: their seal, format and fields were checked when
        they were loaded), the open ones as a replay left them, the calls it added
        last."""
        places = self.places()
        with paused_gc():
            entries = [
                (index, _call(values))
                for piece in self.settled
                for index, values in marshal.loads(piece)
            ]
            entries += [
                (places.get(call_id, self.after + n), call)
                for n, (call_id, call) in enumerate(opened.items())
            ]
            entries.sort(key=_first)
            return {call.call: call for _, call in entries}


def _first(entry: tuple[int, CallState]) -> int:
    return entry[0]


def _call(values: list[Any]) -> CallState:
    """The call of a snapshot's values (as `CallState(**fields)` makes it, without
    the keyword call: a snapshot of a big run holds thousands)."""
    if len(values) != len(_CALL_FIELDS):
        raise ValueError("a call of the snapshot has other fields")
    call: CallState = object.__new__(CallState)
    call.__dict__ = dict(zip(_CALL_FIELDS, values, strict=True))
    call.result = None
    return call


def call_values(call: CallState) -> list[Any]:
    """A call as a snapshot keeps it: its `_CALL_FIELDS`' values, in order."""
    return [getattr(call, name) for name in _CALL_FIELDS]


def packed_calls(
    settled_ids: frozenset[str],
    settled: tuple[bytes, ...],
    opened: dict[str, CallState],
    places: dict[str, int],
    after: int,
) -> DeferredCalls:
    """Calls kept as a snapshot's read keeps them: `settled`, marshalled lists of
    `[index, values]` (`call_values`) of the calls `settled_ids` names; `opened`
    built, each at its index in `places`; `after` an index past all. A snapshot
    written from a state holding them keeps `settled` as it is (`_pack`)."""
    entries = [[places[call_id], call_values(call)] for call_id, call in opened.items()]
    packed = _Packed(settled_ids, settled, marshal.dumps(entries), after)
    return DeferredCalls(opened, packed.settled_ids, packed.build, packed)


def save_snapshot(journal: Path, state: RunState, end: int, crc: int) -> None:
    """Keep `state`, the replay of the journal's first `end` bytes (their CRC-32 is
    `crc`), as its snapshot: for a writer that replayed them itself."""
    _save(journal, state, end, crc)


def _save(journal: Path, state: RunState, end: int, crc: int) -> _Pack:
    """Write the snapshot, in the journal's store where it keeps one (never
    failing for it), else beside the journal; its calls as packed (`_Packed`'s fields)."""
    pack = _pack(state)
    parts = _parts(state, end, crc, pack)
    seal = b"%08x\n" % _crc(parts)
    try:
        store = store_at(journal)
        if not isinstance(store, FileJournal):  # a database keeps the bytes whole
            sealed = b"".join((seal, *parts))
            if store.keep_snapshot(sealed, end, state.last_seq, summary_of(state)):
                return pack
    except OSError as err:
        log.info("the replay snapshot was not kept: %s", err)
        return pack
    path = journal.parent / SNAPSHOT
    temp = path.with_name(f".{path.name}.{os.getpid()}")
    try:
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as file:
            for part in (seal, *parts):  # each as it is: the pieces not copied
                file.write(part)
        os.replace(temp, path)
    except (OSError, ValueError):
        temp.unlink(missing_ok=True)
    return pack


_Pack = tuple[frozenset[str], tuple[bytes, ...], bytes, int]


def _parts(state: RunState, end: int, crc: int, pack: _Pack) -> list[bytes]:
    """The snapshot's bytes after its seal, in parts: the marshalled head (the
    format, the replay's end and CRC, the call fields, the run's fields, and the
    calls: their settled ids, the lengths of the settled pieces, the open calls,
    the index after all), then each settled piece as it is. The ids are a sorted
    list: marshal writes a set's members in order too, but sorts them by their
    marshalled bytes, one more object a member (13 MB at 100,000 calls)."""
    ids, settled, opened, after = pack
    head = (
        FORMAT,
        end,
        crc,
        _CALL_FIELDS,
        {name: getattr(state, name) for name in _RUN_FIELDS},
        (sorted(ids), [len(piece) for piece in settled], opened, after),
    )
    return [marshal.dumps(head), *settled]


def _crc(parts: list[bytes]) -> int:
    """The CRC-32 of the parts' bytes one after the other."""
    crc = 0
    for part in parts:
        crc = zlib.crc32(part, crc)
    return crc


def _rebase(state: RunState, pack: _Pack) -> None:
    """Keep `state`'s settled calls as `pack` holds them, as a read of the snapshot
    just written would: the calls built are the open ones again, so what a replay
    or a read goes through stays a pool's worth however long the fold lives."""
    packed = _Packed(*pack)
    deferred = state.deferred_calls()
    calls = deferred.open if deferred is not None else state.calls
    opened = {call_id: calls[call_id] for call_id in packed.places()}
    state.defer_calls(DeferredCalls(opened, packed.settled_ids, packed.build, packed))


def _pack(state: RunState) -> _Pack:
    """The state's calls as `_Packed` holds them. A state read from a snapshot
    whose settled calls were not built keeps their pieces as it read them, and
    adds the calls settled since as one more (`SETTLED_CHUNKS`)."""
    deferred = state.deferred_calls()
    packed = deferred.source if deferred is not None else None
    pieces: tuple[bytes, ...] = ()
    ids: frozenset[str] = frozenset()
    if deferred is not None and isinstance(packed, _Packed):
        pieces, ids, places = packed.settled, packed.settled_ids, packed.places()
        entries = [
            (places.get(c, packed.after + n), call)
            for n, (c, call) in enumerate(deferred.open.items())
        ]
        after = packed.after + len(deferred.open)
    else:
        entries = list(enumerate(state.calls.values()))
        after = len(entries)
    settled, opened, new = [], [], []
    for index, call in entries:
        values = [getattr(call, name) for name in _CALL_FIELDS]
        if call.state in SETTLED_STATES:
            settled.append([index, values])
            new.append(call.call)
        else:
            opened.append([index, values])
    if len(pieces) >= SETTLED_CHUNKS:
        settled = [entry for piece in pieces for entry in marshal.loads(piece)] + settled
        pieces = ()
    if settled or not pieces:
        pieces += (marshal.dumps(settled),)
    # The ids kept as they are when none settled since (a big run's exit: 100,000
    # of them), not copied into a set and a frozenset again.
    return (ids | frozenset(new) if new else ids), pieces, marshal.dumps(opened), after
