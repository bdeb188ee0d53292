"""A replayed run kept beside its journal, so the owner's commands stay fast on big runs.

`status` and `next` read a run cold, in a new process, every time. A journal of
10,000 calls is tens of MB: decoding all of it costs seconds, its replay little.
`replay_journal` keeps the state a replay of the journal's first `end` bytes
left in `<run>/replay.snapshot` (private, replaced atomically; `marshal`, which
reads back several times faster than JSON, of the plain values replay holds,
behind a CRC-32 of those bytes, so a damaged snapshot is never unmarshalled) and,
while the snapshot is good, decodes and folds only the rows appended after it.
The calls are marshalled apart, inside it, and unmarshalled and built only when
the state's `calls` is first read (`RunState.defer_calls`): `next` of an ended run
reads none of them, `status` all (they are most of a big run's snapshot).

The journal stays the one truth: the snapshot is thrown away and the journal read
whole when it does not match, byte for byte, the journal's first `end` bytes (its
CRC-32 over them, so a journal damaged since is read whole and reported as ever),
when it was written by another crw or Python (its format, the interpreter's tag,
and the fields of a call, differ) or cannot be read. A reader writes it after it
decoded a sixteenth of the journal beyond the one it found (at least 64 KiB, at
most 1 MiB: a journal under 64 KiB is read whole, it is fast) or after it read a
run that ended (its journal grows no more: the next reads decode no row), and never
fails for it: a run directory it cannot write is read whole next time.
"""

from __future__ import annotations

import logging
import marshal
import os
import sys
import zlib
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from crw.journal.framing import paused_gc
from crw.journal.log import JournalCorruptError, JournalRead, decode
from crw.journal.replay import CallState, RunState, replay

log = logging.getLogger("crw.journal")

SNAPSHOT = "replay.snapshot"
FORMAT = f"crw-replay-snapshot/2 {sys.implementation.cache_tag}"
REFRESH_BYTES = 1 << 20
"""The most journal bytes beyond the snapshot a reader decodes before it writes one."""
REFRESH_MIN = 64 << 10
"""The fewest: a journal under this size is read whole (it is fast)."""
REFRESH_SHARE = 16
"""Between the two, a reader writes one once the bytes beyond it are this share
of the journal: a write costs in proportion to the run's calls, so it is made
once per a share of the journal, and every read decodes at most that share."""

_CALL_FIELDS = [f.name for f in fields(CallState) if f.name != "result"]
"""A call's fields the snapshot keeps: all but its result, which can be large and
which the commands do not show (a process that needs results replays the journal)."""
_RUN_FIELDS = [f.name for f in fields(RunState) if f.name != "calls"]
_SEAL = 9
"""The file starts with the CRC-32 of the rest, as eight hex digits and a newline."""


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
    try:
        data = journal.read_bytes()
    except FileNotFoundError:
        return replay(()), JournalRead([], 0, 0, None)
    snapshot = _load(journal.parent / SNAPSHOT, data)
    tail: JournalRead | None = None
    if snapshot is not None:
        try:
            tail = decode(data[snapshot.end :], journal, after=snapshot.state.last_seq)
        except JournalCorruptError:
            snapshot = None  # the damage is reported with the whole journal's offsets
    if tail is None or snapshot is None:
        tail = decode(data, journal)
    if tail.torn is not None and not live:
        log.warning("%s", tail.torn.message)
    start = snapshot.end if snapshot is not None else 0
    state = replay(tail.rows, into=snapshot.state if snapshot is not None else None)
    read = JournalRead(tail.rows, start + tail.end, tail.last_seq, tail.torn)
    beyond = read.end - start
    refresh = min(REFRESH_BYTES, max(REFRESH_MIN, read.end // REFRESH_SHARE))
    if beyond >= refresh or (beyond and state.state == "ended"):
        _save(journal.parent / SNAPSHOT, state, read.end, zlib.crc32(memoryview(data)[: read.end]))
    return state, read


def _load(path: Path, data: bytes) -> Snapshot | None:
    """The snapshot, when it is this crw's and matches the journal's bytes."""
    snapshot = peek_snapshot(path)
    if snapshot is None or snapshot.end > len(data):
        return None
    if zlib.crc32(memoryview(data)[: snapshot.end]) != snapshot.crc:
        return None
    return snapshot


def peek_snapshot(path: Path) -> Snapshot | None:
    """The snapshot at `path` when it is this crw's and whole, unchecked against
    the journal (a reader that checks less: `crw flow list`)."""
    try:
        raw = path.read_bytes()
        if raw[:_SEAL] != b"%08x\n" % zlib.crc32(raw[_SEAL:]):
            return None  # damaged or cut short: marshal must never read such bytes
        head, end, crc, call_fields, run, calls = marshal.loads(raw[_SEAL:])
        if head != FORMAT or call_fields != _CALL_FIELDS or type(calls) is not bytes:
            return None
        state = RunState(**run)
    except (OSError, ValueError, TypeError, EOFError, KeyError, IndexError, AttributeError):
        return None
    state.defer_calls(lambda: _calls(calls))
    return Snapshot(end, crc, state)


def _calls(packed: bytes) -> dict[str, CallState]:
    """The calls of a snapshot's packed calls: bytes this crw marshalled (their
    seal, format and fields were checked when it was loaded)."""
    with paused_gc():
        return {values[0]: _call(values) for values in marshal.loads(packed)}


def _call(values: list[Any]) -> CallState:
    """The call of a snapshot's values (as `CallState(**fields)` makes it, without
    the keyword call: a snapshot of a big run holds thousands)."""
    if len(values) != len(_CALL_FIELDS):
        raise ValueError("a call of the snapshot has other fields")
    call: CallState = object.__new__(CallState)
    call.__dict__ = dict(zip(_CALL_FIELDS, values, strict=True))
    call.result = None
    return call


def save_snapshot(journal: Path, state: RunState, end: int, crc: int) -> None:
    """Keep `state`, the replay of the journal's first `end` bytes (their CRC-32 is
    `crc`), as its snapshot: for a writer that replayed them itself."""
    _save(journal.parent / SNAPSHOT, state, end, crc)


def _save(path: Path, state: RunState, end: int, crc: int) -> None:
    body = (
        FORMAT,
        end,
        crc,
        _CALL_FIELDS,
        {name: getattr(state, name) for name in _RUN_FIELDS},
        marshal.dumps(
            [[getattr(call, name) for name in _CALL_FIELDS] for call in state.calls.values()]
        ),
    )
    temp = path.with_name(f".{path.name}.{os.getpid()}")
    try:
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as file:
            payload = marshal.dumps(body)
            file.write(b"%08x\n" % zlib.crc32(payload) + payload)
        os.replace(temp, path)
    except (OSError, ValueError):
        temp.unlink(missing_ok=True)
