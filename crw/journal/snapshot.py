"""A replayed run kept beside its journal, so the owner's commands stay fast on big runs.

`status` and `next` read a run cold, in a new process, every time. A journal of
10,000 calls is tens of MB: decoding all of it costs seconds, its replay little.
`replay_journal` keeps the state a replay of the journal's first `end` bytes
left in `<run>/replay.snapshot` (private, replaced atomically; `marshal`, which
reads back several times faster than JSON, of the plain values replay holds,
behind a CRC-32 of those bytes, so a damaged snapshot is never unmarshalled) and,
while the snapshot is good, decodes and folds only the rows appended after it.
The calls are marshalled apart, inside it, settled and open
(crw.journal.snapshot_pack): the settled ones are built only when the state's
`calls` is first read, or a row after the snapshot names one; the others at once.
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

from crw.journal.file_store import FileJournal
from crw.journal.framing import paused_gc
from crw.journal.log import JournalCorruptError, JournalRead, decode
from crw.journal.replay import DeferredCalls, RunState, replay
from crw.journal.run_summary import summary_of
from crw.journal.snapshot_pack import (
    CALL_FIELDS,
    Pack,
    Packed,
    call_of,
    keep_packed,
    pack_calls,
    pieces_of,
)
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
    snapshot holds has no `result` (see `CALL_FIELDS`). A torn tail is warned
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
    with `rebase`, the fold's settled calls are then kept packed (`keep_packed`)."""
    beyond = fold.end - fold.saved
    refresh = min(REFRESH_BYTES, max(REFRESH_MIN, fold.end // REFRESH_SHARE))
    if beyond >= refresh or (beyond and fold.state.state == "ended"):
        pack = _save(journal, fold.state, fold.end, fold.crc)
        fold.saved = fold.end
        if rebase:
            keep_packed(fold.state, pack)


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
        if head != FORMAT or call_fields != CALL_FIELDS:
            return None
        state = RunState(**run)
        if type(ids) is not list:
            return None
        packed = Packed(frozenset(ids), pieces_of(body, lengths), opened, after)
        with paused_gc():
            opened = {values[0]: call_of(values) for _, values in marshal.loads(packed.open)}
    except (ValueError, TypeError, EOFError, KeyError, IndexError, AttributeError):
        return None
    state.defer_calls(DeferredCalls(opened, packed.settled_ids, packed.build, packed))
    return Snapshot(end, crc, state)


def save_snapshot(journal: Path, state: RunState, end: int, crc: int) -> None:
    """Keep `state`, the replay of the journal's first `end` bytes (their CRC-32 is
    `crc`), as its snapshot: for a writer that replayed them itself."""
    _save(journal, state, end, crc)


def _save(journal: Path, state: RunState, end: int, crc: int) -> Pack:
    """Write the snapshot, in the journal's store where it keeps one (never
    failing for it), else beside the journal; its calls as packed (`Packed`'s fields)."""
    pack = pack_calls(state)
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


def _parts(state: RunState, end: int, crc: int, pack: Pack) -> list[bytes]:
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
        CALL_FIELDS,
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
