"""The journal file `<run>/journal.jsonl`: its lines, its framing, reading it back.

One row a line: a JSON object `{"seq", "at", "row", "call"?, ...fields,
"commit_seq"}` (see `rows.dump_row`), UTF-8, ended by `\\n`. `seq` starts at 1 and
increases by 1 from line to line.

Framing. The rows of one commit are one batch, written by one `write` and made
durable by one fsync; after a crash a batch is read back whole or not at all.
Every line carries the framing member `commit_seq`, last in the line: the `seq`
of the last row of its batch. A batch counts only when

- every one of its lines ends with `\\n` (a line without it is torn),
- every line parses as a JSON object with integer `seq` and `commit_seq`,
- the seqs are contiguous (the first is the last counted seq + 1) and every
  line of the batch names the same `commit_seq`, and
- its closing line, the one with `seq == commit_seq`, is present.

Reading stops at the first batch that fails any of these, whether it is the tail
of the file (a write the crash cut at any byte) or something in the middle (a
damaged disk block followed by more lines): everything from that batch on is
dropped and reported once, and `end` is the byte offset just past the last whole
batch, where the writer truncates the file before it appends. A journal never
fails to read for its content; a missing file reads as an empty journal.

`commit_seq` is the journal's, not the row's: `encode_body` refuses a row that
has a field of that name and `decode` strips it, so it never reaches a row model.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    # Reading a journal needs no row models: status and replay read plain dicts
    # and must not pay for importing pydantic. Only encoding and row_models do.
    from crw.journal.rows import RowModel

FRAMING = "commit_seq"
"""The framing member every line carries: the seq of the last row of its batch."""

log = logging.getLogger("crw.journal")

_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


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
            f"{self.path}: dropped a torn or damaged tail from byte {self.offset} "
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


def encode_body(row: RowModel) -> bytes:
    """The row's fields as the inside of a JSON object, UTF-8, without `seq` and
    `at` (the writer sets them when it commits) and without braces.

    Raises:
        ValueError: the row has a field named like the framing member, or text
            that is not valid Unicode (a lone surrogate).
        TypeError: a field is not JSON-serializable.
    """
    extra = row.model_extra or {}
    if FRAMING in extra:
        raise ValueError(f"a row may not have a field named {FRAMING!r}: {extra}")
    if None not in extra.values():
        # The hot path: pydantic-core writes the JSON (4x faster than dump_row and
        # json); exclude_none drops only the known fields left unset, as dump_row does.
        text = row.model_dump_json(exclude={"seq", "at"}, exclude_none=True)
        return text[1:-1].encode()
    from crw.journal.rows import dump_row

    fields = dump_row(row)  # keeps an unknown field's null, which exclude_none would drop
    fields.pop("seq", None)
    fields.pop("at", None)
    return _ENCODER.encode(fields)[1:-1].encode()


def encode_batch(first_seq: int, at: str, bodies: list[bytes]) -> bytes:
    """The lines of one batch: rows `first_seq`, `first_seq + 1`, … stamped `at`,
    each with the framing member last. `bodies` are `encode_body` results."""
    at_member = b',"at":' + _ENCODER.encode(at).encode()
    framing_member = b'"%s":%d}\n' % (FRAMING.encode(), first_seq + len(bodies) - 1)
    return b"".join(
        b'{"seq":%d%s,%s%s%s'
        % (first_seq + i, at_member, body, b"," if body else b"", framing_member)
        for i, body in enumerate(bodies)
    )


def decode(data: bytes, path: Path) -> JournalRead:
    """Read the whole batches of a journal's bytes; never raises for content."""
    rows: list[dict[str, Any]] = []
    batch: list[dict[str, Any]] = []
    end = last_seq = pos = batch_end = 0
    size = len(data)
    while pos < size:
        newline = data.find(b"\n", pos)
        if newline < 0:
            return _torn(rows, end, last_seq, path, "last line has no newline")
        line = data[pos:newline]
        pos = newline + 1
        try:
            obj = json.loads(line)
        except (ValueError, RecursionError):
            return _torn(rows, end, last_seq, path, "a line is not JSON")
        if not isinstance(obj, dict):
            return _torn(rows, end, last_seq, path, "a line is not a JSON object")
        seq = obj.get("seq")
        framing = obj.pop(FRAMING, None)
        expected = last_seq + len(batch) + 1
        if type(seq) is not int or seq != expected:
            return _torn(rows, end, last_seq, path, f"expected seq {expected}, read {seq!r}")
        if type(framing) is not int or framing < seq:
            return _torn(rows, end, last_seq, path, f"seq {seq} has no valid {FRAMING}")
        if batch and framing != batch_end:
            return _torn(rows, end, last_seq, path, f"seq {seq} is not in its batch")
        batch_end = framing
        batch.append(obj)
        if seq == framing:
            rows.extend(batch)
            batch = []
            end, last_seq = pos, seq
    if batch:
        return _torn(rows, end, last_seq, path, f"batch ending at seq {batch_end} is cut short")
    return JournalRead(rows, end, last_seq, None)


def _torn(
    rows: list[dict[str, Any]], end: int, last_seq: int, path: Path, reason: str
) -> JournalRead:
    return JournalRead(rows, end, last_seq, TornTail(path, end, reason))


def read_journal(path: Path) -> JournalRead:
    """Read a journal file's whole batches; a missing file is an empty journal.

    A torn or damaged tail is dropped and reported once, as a warning on the
    `crw.journal` logger naming the file and the offset.

    Raises:
        OSError: the file exists and cannot be read.
    """
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return JournalRead([], 0, 0, None)
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

    def __init__(self, path: Path, fd: int, read: JournalRead) -> None:
        self.path = path
        self.last_seq = read.last_seq
        """The seq of the last durable row."""
        self._fd = fd
        self._end = read.end
        self._broken: OSError | None = None

    @classmethod
    def open(cls, path: Path) -> JournalFile:
        """Open (creating) the journal to continue it: read its whole batches,
        truncate a torn tail (reported once), and fsync the directory when the
        file is new so that its name is durable too.

        Raises:
            OSError: the file or its directory cannot be opened, read or synced.
        """
        flags = os.O_RDWR | os.O_APPEND | os.O_CLOEXEC
        try:
            fd = os.open(path, flags | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            fd = os.open(path, flags)
        else:
            _sync_directory(path.parent)
        try:
            read = read_journal(path)
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

    def close(self) -> None:
        os.close(self._fd)


def _sync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
