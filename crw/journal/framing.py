"""The framing of a journal line, and how damage is told from a torn tail.

The rows of one commit are one batch, written by one `write` and made
durable by one fsync; after a crash a batch is read back whole or not at all.
Every line ends with two framing members: `commit_seq`, the `seq` of the last
row of its batch, and `crc`, the CRC-32 (eight lowercase hex digits) of the
line's bytes before `,"crc":`. A line is whole when it ends with `\\n`, its
checksum matches and it parses as a JSON object with integer `seq` and
`commit_seq`. A batch counts only when every one of its lines is whole, the seqs
are contiguous (the first is the last counted seq + 1), every line names the same
`commit_seq`, and its closing line (`seq == commit_seq`) is present.

A journal an older crw wrote has no `crc` member (its lines end with
`commit_seq`): such lines are read as they are, but only before the journal's
first checksummed line, so a run started before the checksum reads back and goes
on, and a line that lost its checksum later is damage.

Where reading stops, at the first line that fails, it tells a torn tail from
corruption by the line itself: a crash cuts a write at some byte, so only the
journal's last line, when it has no newline, can be a torn write.

- Torn tail: the last line has no newline and is a prefix of a line (a write
  the crash cut at any byte, zeros where a write did not land), or a batch's
  whole lines end without its closing line (the cut fell on a newline). The
  batch is dropped and reported once, and `end` is the byte offset just past
  the last whole batch, where the writer truncates the file before it appends.
- Corruption: a line that ends with its newline and is not whole, or not the
  row that follows (a damaged disk block, an edit, a lost or merged line), in
  the middle or in the last line and the last batch alike; a last line that is
  whole but for a byte where its newline was (`ends_whole`); a batch cut short
  after the run's ended row, which closes its batch when a run writes it.
  `crw.journal.log.decode` raises `JournalCorruptError`; nothing is ever
  truncated or appended, and the file is kept as it is until a person restores
  or repairs it. The error names where whole rows of a later batch follow the
  damage, when they do (`later_frame`).

A framed line is any text from a `{"seq":` to the end of its line that parses
as a JSON object with integer `seq` and `commit_seq >= seq`, checksum or not:
a damaged newline merges two lines into one, and a damaged checksum still shows
that rows follow. It belongs to the damaged batch only when it names that
batch's `commit_seq`, as read from the batch's whole lines before the damage
(a seq after the last counted one, up to that commit_seq); when no line of the
damaged batch was whole, any framed line after the damage is a later batch's.
"""

from __future__ import annotations

import gc
import json
import os
import re
import struct
import zlib
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any, TypeGuard

from crw.journal.result_span import SPAN, with_results
from crw.text import json_loads

FRAMING = "commit_seq"
"""The framing member every line carries: the seq of the last row of its batch."""
CHECKSUM = "crc"
"""The framing member every line ends with: the CRC-32 of the bytes before it."""

_DECODER = json.JSONDecoder()
_AT_ENCODER = json.JSONEncoder(ensure_ascii=False)
_CHECKSUM_HEAD = b',"%s":"' % CHECKSUM.encode()
_TRAILER_FORMAT = _CHECKSUM_HEAD + b'%08x"}'
_LINE = b"%s" + _TRAILER_FORMAT + b"\n"
_TRAILER = len(_CHECKSUM_HEAD) + 10
"""Bytes of `,"crc":"xxxxxxxx"}` at the end of every line."""
_FRAME_START = '{"seq":'
_FRAME_HEAD = _FRAME_START.encode()
_LINE_ENDS = re.compile(
    rb'%s([0-9a-f]{8})"\}\n(?=%s|\Z)' % (re.escape(_CHECKSUM_HEAD), re.escape(_FRAME_HEAD))
)
"""A line's end, its checksum member, where the next line starts with `{"seq":`."""
_LAST_TRAILER = re.compile(rb'%s[0-9a-f]{8}"\}' % re.escape(_CHECKSUM_HEAD))
"""A checksum member and the brace that ends its line."""
_LEGACY_END = re.compile(rb'"%s":[0-9]+\}$' % FRAMING.encode())
"""How a line of a crw before the checksum ends: its commit_seq last."""


def encode_batch(first_seq: int, at: str, bodies: list[bytes]) -> bytes:
    """The lines of one batch: rows `first_seq`, `first_seq + 1`, … stamped `at`,
    each ending with the framing members. `bodies` are `encode_body` results."""
    at_member = b',"at":' + _AT_ENCODER.encode(at).encode()
    framing_member = b'"%s":%d' % (FRAMING.encode(), first_seq + len(bodies) - 1)
    lines = []
    for i, body in enumerate(bodies):
        head = b'{"seq":%d%s,%s%s%s' % (
            first_seq + i,
            at_member,
            body,
            b"," if body else b"",
            framing_member,
        )
        lines.append(_LINE % (head, zlib.crc32(head)))
    return b"".join(lines)


PIECE = 1 << 16
"""Bytes of lines `whole_batches` checks and parses at a time (whole lines, so a
little more): a piece's line heads, checksums and array are freed before the next
piece's, which reuse their memory rather than the kernel handing out fresh pages
for 80 MB of them (page faults were a third of a big read's CPU), and a piece's
rows are framed while they are still in the cache."""


def whole_batches(
    pieces: Iterable[bytes | memoryview], after: int
) -> tuple[list[dict[str, Any]], int] | None:
    """The rows of a journal's bytes and the seq of its last row, when they are
    whole batches as the writer leaves them: every line checksummed, the seqs
    following on from `after`, the last batch closed. The bytes come as `pieces`
    of whole lines (`pieces_of`, `FilePieces`), each parsed as one JSON array
    (`parse_array`: half the time of a parse a line). A completed row that keeps
    its result as a span of its raw_text reads with its `result`
    (`crw.journal.result_span`). None when anything is not so: `decode` then
    reads a line at a time, to tell where and how the bytes are damaged."""
    rows: list[dict[str, Any]] = []
    # The rows with a result span, found by their key while the loop has them in the
    # cache (a search of 28 MB of bytes for the member took 12 ms).
    spanned: list[dict[str, Any]] = []
    seq, pending = after, None
    for piece in pieces:
        objs = _parsed_lines(memoryview(piece))
        if objs is None:
            return None
        for obj in objs:
            if type(obj) is not dict:
                return None
            framing, row_seq = obj.pop(FRAMING, None), obj.get("seq")
            if type(row_seq) is not int or type(framing) is not int or row_seq != seq + 1:
                return None
            if framing < row_seq or (pending is not None and framing != pending):
                return None
            seq = row_seq
            pending = None if seq == framing else framing
            if SPAN in obj:
                spanned.append(obj)
        rows += objs
    if pending is not None:
        return None
    with_results(spanned)
    return rows, seq


def pieces_of(data: bytes) -> Iterator[memoryview]:
    """`data` as `whole_batches` takes it: views of about `PIECE` bytes each, cut
    just after a newline (the last one wherever `data` ends)."""
    view = memoryview(data)
    start, size = 0, len(data)
    while start < size:
        newline = data.find(b"\n", start + PIECE)
        end = size if newline < 0 else newline + 1
        yield view[start:end]
        start = end


class FilePieces:
    """A journal file's bytes as `whole_batches` takes them, read from the open file
    `fd` as they are taken: pieces of whole lines of about `PIECE` bytes, the last
    one as the file ends. `size` is the bytes read so far."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self.size = 0

    def __iter__(self) -> Iterator[bytes]:
        held: list[bytes | memoryview] = []  # the start of a line the last read cut
        while chunk := os.read(self._fd, PIECE):
            self.size += len(chunk)
            newline = chunk.rfind(b"\n") + 1
            if not newline:
                held.append(chunk)
                continue
            whole = newline == len(chunk) and not held
            yield chunk if whole else b"".join([*held, memoryview(chunk)[:newline]])
            held = [memoryview(chunk)[newline:]] if newline < len(chunk) else []
        if held:
            yield b"".join(held)


def _parsed_lines(piece: memoryview) -> list[Any] | None:
    """The JSON values of the lines of `piece`, when every line starts with
    `{"seq":` and ends with the checksum of its bytes before its checksum member;
    else None. Each line is parsed without its checksum member, closed.

    With no Python step a line: one split at every line's end, the checksums taken
    by `map` and compared as one hex string, the lines joined into one array."""
    parts = _LINE_ENDS.split(piece)
    heads = parts[0::2]
    if heads.pop() or not heads or heads[0][: len(_FRAME_HEAD)] != _FRAME_HEAD:
        return None  # bytes after the last checksum, or a line that is not framed
    sums = struct.pack(f">{len(heads)}I", *map(zlib.crc32, heads))
    if sums.hex().encode() != b"".join(parts[1::2]):
        return None
    lines = len(heads)
    heads[0] = b"[" + heads[0]
    heads.append(b"null]")
    array = b"},".join(heads)
    if b"\n" in array:  # a line the split did not end: not every line is checksummed
        return None
    objs = parse_array(array)
    if type(objs) is not list or len(objs) != lines + 1 or objs.pop() is not None:
        return None
    return objs


def parse_array(text: bytes) -> Any:
    """The JSON value of `text`, or None when it is not JSON (`json_loads`:
    pydantic-core's parser where the process has loaded it)."""
    try:
        return json_loads(text)
    except (ValueError, RecursionError):
        return None


@contextmanager
def paused_gc() -> Iterator[None]:
    """Hold the cyclic garbage collector off while a read builds its rows: a journal
    of 100,000 rows is millions of objects, none in a cycle, and the collections
    their allocation triggers cost a third of the read. It runs again after
    (unless it was off before), with what was built counted as old (`_promote`):
    not collected at once, as every object made while it was off would be."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            _promote()
            gc.enable()


_PROMOTE_AFTER = 5_000
"""Young objects a pause must leave before they are promoted: fewer cost a short
collection (~1 ms), which also frees their young garbage sooner."""


def _promote() -> None:
    """Move every object the collector tracks to its oldest generation, as if they
    had survived the young collections, without passing over them: the first
    object made after a long pause would otherwise start a collection of all the
    young ones (60,000 of 100,000 rows: ~50 ms). A freeze and an unfreeze do that
    (and reset the young count); not when the process froze objects of its own,
    which the unfreeze would release, nor after a pause that made few objects (a
    `next --wait` reading a few rows at a time)."""
    if gc.get_count()[0] > _PROMOTE_AFTER and gc.get_freeze_count() == 0:
        gc.freeze()
        gc.unfreeze()


def whole_line(
    data: bytes, view: memoryview, pos: int, newline: int, *, legacy: bool = False
) -> dict[str, Any] | str:
    """The line's object, checksum checked, or why it is damaged. `view` is
    `data`'s, made once: the checksum is taken without copying the line.

    With `legacy`, a line of a crw before the checksum (no `crc` member: it ends
    with `"commit_seq":N}`) is read as it is; the reader allows that only before
    the journal's first checksummed line, so a run an older crw wrote reads back.
    """
    head = newline - _TRAILER
    checksummed = head > pos and data[head:newline] == _TRAILER_FORMAT % zlib.crc32(view[pos:head])
    if not checksummed and not (legacy and _LEGACY_END.search(data, pos, newline)):
        return "a line's checksum does not match"
    try:
        obj = json.loads(data[pos:newline])
    except (ValueError, RecursionError):
        return "a line is not JSON"
    if not framed(obj):
        return f"a line is not a JSON object with integer seq and {FRAMING}"
    return obj


def ends_whole(data: bytes, view: memoryview, pos: int) -> bool:
    """Whether the line at `pos`, the last of `data` and with no newline, is a whole
    checksummed line and bytes after it: its newline was damaged. A write a crash
    cut leaves a prefix of a line (a whole line without its newline, too), never a
    whole line with something else after it."""
    return any(
        trailer.end() < len(data)
        and data[trailer.start() : trailer.end()]
        == _TRAILER_FORMAT % zlib.crc32(view[pos : trailer.start()])
        for trailer in _LAST_TRAILER.finditer(data, pos)
    )


def framed(obj: Any) -> TypeGuard[dict[str, Any]]:
    """Whether `obj` is a JSON object with integer `seq` and `commit_seq >= seq`."""
    if not isinstance(obj, dict):
        return False
    seq, framing = obj.get("seq"), obj.get(FRAMING)
    return type(seq) is int and type(framing) is int and 0 < seq <= framing


def later_frame(data: bytes, start: int, last_seq: int, pending: int | None) -> int | None:
    """The offset of the first framed line at or after `start` that is not a line
    of the damaged batch (the one ending at `pending`), or None: where whole rows
    follow the damage, which the corruption error names."""
    line_start = data.rfind(b"\n", 0, start) + 1
    while line_start < len(data):
        newline = data.find(b"\n", line_start)
        if newline < 0:
            return None
        text = data[line_start:newline].decode("utf-8", "surrogateescape")
        begin = len(data[line_start:start].decode("utf-8", "surrogateescape"))
        for at, obj in _frames_in(text, begin):
            if not (pending is not None and obj[FRAMING] == pending and last_seq < obj["seq"]):
                return line_start + len(text[:at].encode("utf-8", "surrogateescape"))
        line_start = newline + 1
    return None


def _frames_in(text: str, begin: int) -> Iterator[tuple[int, dict[str, Any]]]:
    """Each framed object that starts with `{"seq":` at or after `begin` in the
    line `text` and runs to its end: its index and the object."""
    at = text.find(_FRAME_START, begin)
    while at >= 0:
        try:
            obj, stop = _DECODER.raw_decode(text, at)
        except (ValueError, RecursionError):
            pass
        else:
            if not text[stop:].strip() and framed(obj):
                yield at, obj
        at = text.find(_FRAME_START, at + 1)
