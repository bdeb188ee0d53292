"""A run's timeline tracks read from a snapshot of their fold and the rows after it.

`crw flow timeline` and the web view's picture fold every row of a run
(`crw.engine.views.timeline_tracks`); a 10,000-call run's journal is tens of MB,
whose decode and fold take seconds. As `replay_journal` keeps the replay beside
the journal, `read_tracks` keeps the fold in `<run>/timeline.snapshot` (private,
replaced atomically; `marshal` of the fold's plain values behind a CRC-32 of
them) at the journal's first `end` bytes, and decodes and folds only the rows
after it. Each call's state comes from the run's replay (`replay_journal`: its
snapshot and the rows after it), and the fold reads to exactly the bytes that
replay read, so the tracks are those the whole journal folds to, byte for byte.

The journal stays the one truth: the snapshot is ignored (and the journal folded
from its start) when it does not match the journal's first `end` bytes (their
CRC-32), reaches beyond what the replay read, was written by another crw or
Python, or cannot be read. A reader writes it when it folded a refresh share of
the journal beyond the one it found (the replay snapshot's rule: a sixteenth,
at least 64 KiB, at most 256 KiB) or read a run that ended beyond it, and never
fails for it.
"""

from __future__ import annotations

import io
import marshal
import os
import sys
import zlib
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from crw.engine.run.rundir import RunDir
from crw.engine.views.timeline_tracks import FOLD_FIELDS, TrackFold, Tracks
from crw.journal import snapshot as replay_snapshot
from crw.journal.framing import paused_gc
from crw.journal.log import decode
from crw.journal.snapshot import crc_of, replay_journal
from crw.journal.stores import store_at

TIMELINE_SNAPSHOT = "timeline.snapshot"
FORMAT = f"crw-timeline-snapshot/1 {sys.implementation.cache_tag}"
_SHAPE = [list(names) for names in FOLD_FIELDS]
"""The fold's fields as marshal reads them back (lists)."""
_SEAL = 9
"""The file starts with the CRC-32 of the rest, as eight hex digits and a newline."""


@dataclass
class _Kept:
    """A fold of the journal's first `end` bytes (their CRC-32 `crc`, the seq of
    their last row `last_seq`)."""

    fold: TrackFold
    end: int
    crc: int
    last_seq: int


def read_tracks(run: RunDir, *, now: datetime | None, live: bool) -> Tracks:
    """The run's tracks as `timeline_tracks.tracks` folds the journal's whole
    batches (`now` ends what is open: a live run's present), from the snapshot
    of the fold and the rows after it; `live`: a process holds the run (its torn
    tail is the batch it is writing, not warned about).

    Raises:
        OSError: the journal cannot be read.
        JournalCorruptError: the journal is damaged (not a torn tail).
    """
    state, read = replay_journal(run.journal, live=live)
    path = run.root / TIMELINE_SNAPSHOT
    with store_at(run.journal).open_bytes() as file:
        kept = _load(path, file, read.end)
        saved = kept.end
        file.seek(kept.end)
        data = file.read(read.end - kept.end)
    tail = decode(data, run.journal, after=kept.last_seq)
    for row in tail.rows:
        kept.fold.read(row)
    kept.crc = zlib.crc32(memoryview(data)[: tail.end], kept.crc)
    kept.end += tail.end
    kept.last_seq = tail.last_seq
    beyond = kept.end - saved
    share = kept.end // replay_snapshot.REFRESH_SHARE
    refresh = min(replay_snapshot.REFRESH_BYTES, max(replay_snapshot.REFRESH_MIN, share))
    if beyond >= refresh or (beyond and state.state == "ended"):
        _save(path, kept)
    return kept.fold.tracks(state.calls, now)


def _load(path: Path, journal: io.BufferedIOBase, upto: int) -> _Kept:
    """The snapshot at `path` when it is this crw's, whole, within the journal's
    first `upto` bytes and matches them; else an empty fold at the start."""
    try:
        raw = path.read_bytes()
        body = memoryview(raw)[_SEAL:]
        if raw[:_SEAL] != b"%08x\n" % zlib.crc32(body):
            raise ValueError("damaged")
        with paused_gc():
            head, shape, end, crc, last_seq, values = marshal.loads(body)
            if head != FORMAT or shape != _SHAPE or not 0 <= end <= upto:
                raise ValueError("another crw's, or beyond the journal read")
            if crc_of(journal, end) != crc:
                raise ValueError("not this journal's")
            return _Kept(TrackFold.of(values), end, crc, last_seq)
    except (OSError, ValueError, TypeError, EOFError, KeyError, IndexError, AttributeError):
        return _Kept(TrackFold(), 0, 0, 0)


def _save(path: Path, kept: _Kept) -> None:
    """Write the snapshot of `kept`, replaced atomically; a run directory it cannot
    be written to is left as it was (the fold is then read whole next time)."""
    temp = path.with_name(f".{path.name}.{os.getpid()}")
    try:
        values = kept.fold.values()
        payload = marshal.dumps((FORMAT, _SHAPE, kept.end, kept.crc, kept.last_seq, values))
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as file:
            file.write(b"%08x\n" % zlib.crc32(payload))
            file.write(payload)
        os.replace(temp, path)
    except (OSError, ValueError):
        temp.unlink(missing_ok=True)
