"""The journal file `<run>/journal.jsonl`: its lines, its framing, reading it back.

One row a line: a JSON object `{"seq", "at", "row", "call"?, ...fields,
"commit_seq", "crc"}` (see `rows.dump_row`), UTF-8, ended by `\\n`. `seq` starts
at 1 and increases by 1 from line to line.

Text. A string is written as the UTF-16 code units JSON strings are made of: a
lone surrogate (text that is not valid Unicode, such as an answer holding the
JSON escape `\\ud800`) is written as its `\\uXXXX` escape, so the line stays
UTF-8 and the row reads back exactly. The one thing JSON cannot keep apart is a
high surrogate directly followed by a low one: it reads back as the character the
pair encodes, as every JSON reader reads it.

Framing (`crw.journal.framing`). The rows of one commit are one batch, written by
one `write` and made durable by one fsync; after a crash a batch is read back
whole or not at all. Every line ends with `commit_seq`, the `seq` of the last row
of its batch, and `crc`, the CRC-32 of the line. Reading stops at the first batch
that is not whole. Only what a crash leaves is a torn tail: a last line with no
newline, or a batch whose whole lines end before its closing line; it is dropped
and reported once, and `end` is the byte offset just past the last whole batch,
where the writer truncates the file before it appends. A line that ends with its
newline and is not whole, anywhere, the last line too, is damage: the journal is
corrupt, `decode` raises `JournalCorruptError`, and nothing is ever truncated or
appended.

A missing file reads as an empty journal.

`commit_seq` and `crc` are the journal's, not the row's: `encode_body` refuses a
row that has a field of either name and `decode` strips them, so they never reach
a row model.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from crw.errors import RefusedError
from crw.journal.framing import CHECKSUM as CHECKSUM
from crw.journal.framing import FRAMING as FRAMING
from crw.journal.framing import (
    FilePieces,
    ends_whole,
    later_frame,
    paused_gc,
    pieces_of,
    whole_batches,
    whole_line,
)
from crw.journal.framing import encode_batch as encode_batch
from crw.journal.result_span import SPAN_FIELD, with_results
from crw.private import PRIVATE_FILE, umask_takes
from crw.rawfile import read_open
from crw.text import escape_surrogates

if TYPE_CHECKING:
    # Reading a journal needs no row models: status and replay read plain dicts
    # and must not pay for importing pydantic. Only encoding and row_models do.
    from crw.journal.rows import RowModel

log = logging.getLogger("crw.journal")

_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
_UNSTAMPED = {"seq", "at"}
"""The fields `encode_body` leaves out: the writer's, set when it commits."""
_SPANNED = {*_UNSTAMPED, "result"}
"""And of a row whose result stands in its raw_text (`crw.journal.result_span`)."""
_REPLACEMENT = "\ufffd".encode()


@dataclass(frozen=True)
class TornTail:
    """Where reading stopped: the bytes from `offset` on were dropped."""

    path: Path
    offset: int
    reason: str

    @property
    def message(self) -> str:
        """One line for the user: what was dropped, where, and that it is safe."""
        return (
            f"{self.path}: dropped a torn tail from byte {self.offset} "
            f"({self.reason}); the rows before it are intact"
        )


@dataclass(frozen=True)
class JournalRead:
    """A journal read back: its whole batches, framing stripped.

    `rows` are plain dicts (replay and status read dicts, for speed); `end` is
    the byte offset just past the last whole batch; `last_seq` is the seq of its
    last row (0 for an empty journal); `torn` says what was dropped, if anything.
    """

    rows: list[dict[str, Any]]
    end: int
    last_seq: int
    torn: TornTail | None

    def row_models(self) -> list[RowModel]:
        """The rows as row models (`rows.parse_row`)."""
        from crw.journal.rows import parse_row

        return [parse_row(row) for row in self.rows]


class JournalCorruptError(RefusedError):
    """The journal is damaged at `offset`: a line that ends with its newline and is
    not whole, or rows of a later batch follow the damage (at `valid_at`, None when
    none do): not a torn tail. Nothing may append to it or truncate it; `intact` is
    what reads before the damage (its `torn` is None)."""

    FIX = (
        "the file is kept as it is, nothing appends to it or cuts it; restore the journal "
        "from a backup or repair the damaged line by hand, then resume the run"
    )

    def __init__(
        self, path: Path, offset: int, valid_at: int | None, reason: str, intact: JournalRead
    ) -> None:
        self.path = path
        self.offset = offset
        self.valid_at = valid_at
        self.reason = reason
        self.intact = intact
        super().__init__(f"{self.damage}: the run is corrupt; {self.FIX}")

    def report(self) -> dict[str, object]:
        """The `corrupt` object a command's `--json` prints: where, why, what to do."""
        return {
            "journal": str(self.path),
            "offset": self.offset,
            "valid_at": self.valid_at,
            "reason": self.reason,
            "damage": self.damage,
            "fix": self.FIX,
        }

    @property
    def damage(self) -> str:
        """What is damaged and where, with where whole rows follow when they do."""
        where = f"journal {self.path} is damaged at byte {self.offset} ({self.reason})"
        if self.valid_at is None:
            return where
        return f"{where} and whole rows follow at byte {self.valid_at}"

    def shifted(self, by: int) -> JournalCorruptError:
        """The same damage with its offsets `by` bytes further on (a read of the
        journal's tail reported in the whole journal's offsets)."""
        valid_at = None if self.valid_at is None else self.valid_at + by
        return JournalCorruptError(self.path, self.offset + by, valid_at, self.reason, self.intact)


def encode_body(row: RowModel) -> bytes:
    """The row's fields as the inside of a JSON object, UTF-8, without `seq` and
    `at` (the writer sets them when it commits) and without braces. A lone
    surrogate is written as its `\\uXXXX` escape (see the module's "Text"). A
    completed row with a `result_span` is written without its `result`, which
    its raw_text holds (`crw.journal.result_span`; `decode` puts it back).

    Raises:
        ValueError: the row has a field named like a framing member.
        TypeError: a field is not JSON-serializable.
    """
    extra = row.model_extra or {}
    spanned = getattr(row, "result_span", None) is not None and row.row == "completed"
    if FRAMING in extra or CHECKSUM in extra:
        raise ValueError(f"a row may not have a field named {FRAMING!r} or {CHECKSUM!r}: {extra}")
    if None not in extra.values():
        # The hot path: pydantic-core writes the JSON (4x faster than dump_row and
        # json); exclude_none drops only the known fields left unset, as dump_row does.
        # It refuses a lone surrogate in a string and writes one in a typed dict's
        # key as U+FFFD: either way the path below writes the text exactly. Its
        # serializer is called as model_dump_json calls it, for its UTF-8 bytes, not
        # decoded to text and encoded back (5 rows a call).
        try:
            left_out = _SPANNED if spanned else _UNSTAMPED
            data = row.__pydantic_serializer__.to_json(row, exclude=left_out, exclude_none=True)
        except ValueError:
            pass
        else:
            if _REPLACEMENT not in data:
                return data[1:-1]
    from crw.journal.rows import dump_row

    fields = dump_row(row)  # keeps an unknown field's null, which exclude_none would drop
    fields.pop("seq", None)
    fields.pop("at", None)
    if spanned:
        fields.pop("result", None)
    return escape_surrogates(_ENCODER.encode(fields)[1:-1]).encode()


def decode(data: bytes, path: Path, *, after: int = 0) -> JournalRead:
    """Read the whole batches of a journal's bytes; a torn tail is dropped.

    `after` is the seq of the row just before `data`, when `data` is the journal's
    tail from the end of an earlier read (offsets are then the tail's).

    A completed row that keeps its result as a span of its raw_text reads with its
    `result` (`crw.journal.result_span`), as every row that keeps one.

    Raises:
        JournalCorruptError: a line that ends with its newline is damaged, or
            another damage a crash cannot leave (`crw.journal.framing`).
    """
    with paused_gc():
        whole = whole_batches(pieces_of(data), after)
    if whole is not None:
        return JournalRead(whole[0], len(data), whole[1], None)
    spans = SPAN_FIELD in data
    with paused_gc():
        try:
            read = _decode_lines(data, path, after)
        except JournalCorruptError as err:
            if spans:
                with_results(err.intact.rows)
            raise
    if spans:
        with_results(read.rows)
    return read


def _decode_lines(data: bytes, path: Path, after: int) -> JournalRead:
    """`decode` a line at a time, stopping at the first damage.

    Only the last line, when it has no newline, can be a write a crash cut: a
    line that ends with its newline and is not whole, or is not the row that
    follows, is damage wherever it is, the journal's last line too."""
    rows: list[dict[str, Any]] = []
    batch: list[dict[str, Any]] = []
    end = pos = batch_end = 0
    last_seq = after
    checked = False  # a checksummed line was read: no line of an older crw may follow
    size = len(data)
    view = memoryview(data)
    while pos < size:
        newline = data.find(b"\n", pos)
        if newline < 0:
            intact = JournalRead(rows, end, last_seq, None)
            if ends_whole(data, view, pos):  # a whole line and a byte that is no newline
                raise JournalCorruptError(path, pos, None, "a line's newline is damaged", intact)
            return _torn(path, intact, batch, "a line has no newline")
        obj = whole_line(data, view, pos, newline, legacy=not checked)
        if isinstance(obj, str):
            intact = JournalRead(rows, end, last_seq, None)
            raise _corrupt(data, path, intact, batch_end if batch else None, pos, pos + 1, obj)
        seq, framing = obj["seq"], obj.pop(FRAMING)
        expected = last_seq + len(batch) + 1
        if seq != expected or (batch and framing != batch_end):
            intact = JournalRead(rows, end, last_seq, None)
            reason = f"expected seq {expected}, read seq {seq} of the batch ending at {framing}"
            raise _corrupt(data, path, intact, batch_end if batch else None, pos, pos, reason)
        if obj.pop(CHECKSUM, None) is not None:
            checked = True
        batch_end = framing
        batch.append(obj)
        pos = newline + 1
        if seq == framing:
            rows.extend(batch)
            batch = []
            end, last_seq = pos, seq
    if batch:
        intact = JournalRead(rows, end, last_seq, None)
        return _torn(path, intact, batch, f"batch ending at seq {batch_end} is cut short")
    return JournalRead(rows, end, last_seq, None)


def _torn(path: Path, intact: JournalRead, batch: list[dict[str, Any]], reason: str) -> JournalRead:
    """The read up to the last whole batch, the lines after it dropped as a torn
    tail; but a run's ended row closes its batch, so a batch cut short after one
    is damage: dropped, it would leave an ended run to be started again."""
    if any(row.get("row") == "ended" for row in batch):
        reason = "a batch cut short holds the run's ended row"
        raise JournalCorruptError(path, intact.end, None, reason, intact)
    torn = TornTail(path, intact.end, reason)
    return JournalRead(intact.rows, intact.end, intact.last_seq, torn)


def _corrupt(
    data: bytes,
    path: Path,
    intact: JournalRead,
    pending: int | None,
    offset: int,
    scan_from: int,
    reason: str,
) -> JournalCorruptError:
    """The damage at `offset`, with where a framed line of a later batch starts at
    or after `scan_from`, when one does."""
    valid_at = later_frame(data, scan_from, intact.last_seq, pending)
    return JournalCorruptError(path, offset, valid_at, reason, intact)


def read_journal(path: Path) -> JournalRead:
    """Read a journal file's whole batches; a missing file is an empty journal.

    A torn tail is dropped and reported once, as a warning on the
    `crw.journal` logger naming the file and the offset.

    The file is read a piece at a time (`crw.journal.framing.FilePieces`) while
    it is whole batches, with no copy of all of it (28 MB for 100,000 rows, every
    page of it fresh from the kernel); at anything else it is read again, whole,
    and `decode`d.

    Raises:
        OSError: the file exists and cannot be read.
        JournalCorruptError: damage a crash cannot leave, the last line's too.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return JournalRead([], 0, 0, None)
    try:
        pieces = FilePieces(fd)
        with paused_gc():
            whole = whole_batches(pieces, 0)
        if whole is not None:
            return JournalRead(whole[0], pieces.size, whole[1], None)
        os.lseek(fd, 0, os.SEEK_SET)
        data = read_open(fd, os.fstat(fd).st_size)
    finally:
        os.close(fd)
    read = decode(data, path)
    if read.torn is not None:
        log.warning("%s", read.torn.message)
    return read


def sync_data(fd: int) -> None:
    """Make the file's data durable: `fdatasync` where there is one (it also
    flushes the size an append changed), else `fsync`."""
    getattr(os, "fdatasync", os.fsync)(fd)


class JournalFile:
    """The open journal, for appending whole batches. Blocking I/O: the writer
    decides which thread runs it. Not safe for concurrent use; one writer owns it.
    """

    blocking = False
    """An append waits on the local disk only (`crw.journal.store.JournalAppender`)."""
    lease = None
    """No lease: the run lock, a file lock, holds the run while its process lives."""

    def __init__(self, path: Path, fd: int, read: JournalRead) -> None:
        self.path = path
        self.last_seq = read.last_seq
        """The seq of the last durable row."""
        self._fd = fd
        self._end = read.end
        self._broken: OSError | None = None

    @classmethod
    def open(cls, path: Path, known: JournalRead | None = None) -> JournalFile:
        """Open (creating) the journal to continue it: read its whole batches,
        truncate a torn tail (reported once), and fsync the directory when the
        file is new so that its name is durable too. `known` is the read of the
        file a caller made under the run lock, which keeps every other writer out
        (the journal is then not decoded again).

        Raises:
            OSError: the file or its directory cannot be opened, read or synced.
            JournalCorruptError: the journal is corrupt; it is left as it is.
        """
        flags = os.O_RDWR | os.O_APPEND | os.O_CLOEXEC
        try:
            fd = os.open(path, flags | os.O_CREAT | os.O_EXCL, PRIVATE_FILE)
        except FileExistsError:
            fd = os.open(path, flags)
        else:
            if umask_takes(PRIVATE_FILE):  # the open made it 0600 already under most
                os.fchmod(fd, PRIVATE_FILE)
            _sync_directory(path.parent)
        try:
            read = known if known is not None else read_journal(path)
            if read.torn is not None:
                os.ftruncate(fd, read.end)
                sync_data(fd)
        except BaseException:
            os.close(fd)
            raise
        return cls(path, fd, read)

    def append(self, data: bytes, rows: int) -> None:
        """Append one group of whole batches holding `rows` rows and make it
        durable. On failure the file is cut back to its last durable end, so it
        stays a valid journal, and the error is raised.

        Raises:
            OSError: the write or the sync failed (after the cut-back). When the
                cut-back fails too, this and every later append raise: the file
                may end in a torn batch, which the next open drops.
        """
        if self._broken is not None:
            raise self._broken
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(self._fd, view) :]
            sync_data(self._fd)
        except OSError:
            try:
                os.ftruncate(self._fd, self._end)
                sync_data(self._fd)
            except OSError as cut:
                self._broken = OSError(
                    cut.errno, f"could not cut back after a failed append ({cut.strerror})"
                )
            raise
        self._end += len(data)
        self.last_seq += rows

    def renew(self) -> None:
        """Nothing to renew: the file store keeps no lease."""

    def close(self) -> None:
        os.close(self._fd)


def _sync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
