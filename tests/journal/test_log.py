"""The journal file: its lines, its framing, and reading it back after a crash."""

from __future__ import annotations

import json
import logging
import os
import zlib
from itertools import cycle
from pathlib import Path
from typing import Any
from unittest.mock import ANY

import pydantic_core
import pytest
import trio

import crw.journal.framing as framing
from crw.actors.journal_writer import open_journal_writer
from crw.clock import fixed_clock
from crw.errors import RefusedError
from crw.journal.log import (
    CHECKSUM,
    FRAMING,
    JournalCorruptError,
    JournalFile,
    decode,
    encode_batch,
    encode_body,
    read_journal,
)
from crw.journal.result_span import with_results
from crw.journal.rows import Completed, RowModel, Started, UnknownRow
from tests.journal.decoding import count_decoded_lines

STAMP = "2026-11-29T19:35:51.123456Z"
BATCH_SIZES = (1, 3, 2, 4, 1, 2, 3)


def _row(batch: int, i: int) -> RowModel:
    # Non-ASCII text, so byte offsets and character offsets differ.
    return Started(call=f"c{batch}", backend="codex", process=f"prozeß-{i}", pid=batch * 10 + i)


async def _write_batches(path: Path) -> list[int]:
    """Write BATCH_SIZES with the real writer; the byte offset after each batch."""
    ends = []
    async with open_journal_writer(path, clock=fixed_clock(STAMP)) as journal:
        for batch, size in enumerate(BATCH_SIZES):
            await journal.commit([_row(batch, i) for i in range(size)])
            ends.append((await trio.Path(path).stat()).st_size)
    return ends


def count_parses(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """A list that gets the name of the parser each JSON parse from now on takes:
    `json` or `pydantic_core`."""
    parses: list[str] = []
    loads, from_json = json.loads, pydantic_core.from_json

    def json_parse(text: Any, **kwargs: Any) -> Any:
        parses.append("json")
        return loads(text, **kwargs)

    def core_parse(text: Any, **kwargs: Any) -> Any:
        parses.append("pydantic_core")
        return from_json(text, **kwargs)

    monkeypatch.setattr(json, "loads", json_parse)
    monkeypatch.setattr(pydantic_core, "from_json", core_parse)
    return parses


def _torn_warnings(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "crw.journal" and r.levelno == logging.WARNING]


def test_line_is_seq_at_row_call_then_fields_then_framing() -> None:
    row = Started(call="c1", backend="codex", pid=7)
    line = encode_batch(1, STAMP, [encode_body(row)])
    head = (
        b'{"seq":1,"at":"2026-11-29T19:35:51.123456Z","row":"started","call":"c1",'
        b'"backend":"codex","pid":7,"commit_seq":1'
    )
    assert line == head + b',"crc":"%08x"}\n' % zlib.crc32(head)


def test_every_line_of_a_batch_names_the_seq_of_its_last_row() -> None:
    bodies = [encode_body(Started(pid=i)) for i in range(3)]
    lines = [json.loads(line) for line in encode_batch(5, STAMP, bodies).splitlines()]
    assert [(line["seq"], line[FRAMING]) for line in lines] == [(5, 7), (6, 7), (7, 7)]
    assert [list(line)[-2:] for line in lines] == [[FRAMING, CHECKSUM]] * 3


def test_row_without_fields_still_encodes_to_a_json_object() -> None:
    line = encode_batch(1, STAMP, [encode_body(RowModel())])
    assert json.loads(line) == {"seq": 1, "at": STAMP, FRAMING: 1, CHECKSUM: ANY}


def test_seq_and_at_of_the_row_are_the_writers_not_the_rows() -> None:
    body = encode_body(Started(seq=99, at="yesterday", pid=1))
    assert json.loads(encode_batch(3, STAMP, [body])) == {
        "seq": 3,
        "at": STAMP,
        "row": "started",
        "pid": 1,
        FRAMING: 3,
        CHECKSUM: ANY,
    }


def test_a_rows_body_is_pydantic_cores_bytes_never_decoded_to_text_and_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rows = [
        Started(call="c1", backend="codex", pid=7),
        Started(process="prozeß ✓ 🎉", extra_field={"a": [1, None]}),
        RowModel(),
    ]
    want = [row.model_dump_json(exclude={"seq", "at"}, exclude_none=True) for row in rows]
    dumped: list[RowModel] = []
    dump = RowModel.model_dump_json

    def counted(self: RowModel, **kwargs: Any) -> str:
        dumped.append(self)
        return dump(self, **kwargs)

    monkeypatch.setattr(RowModel, "model_dump_json", counted)
    assert [encode_body(row) for row in rows] == [text[1:-1].encode() for text in want]
    assert dumped == []


def test_text_is_written_as_utf8_and_a_lone_surrogate_as_its_escape(tmp_path: Path) -> None:
    assert encode_body(Started(process="prozeß")) == '"row":"started","process":"prozeß"'.encode()
    body = encode_body(Started(process="bad \udcff name ß"))
    assert body == b'"row":"started","process":"bad \\udcff name \xc3\x9f"'
    (row,) = decode(encode_batch(1, STAMP, [body]), tmp_path / "journal.jsonl").rows
    assert row["process"] == "bad \udcff name ß"


@pytest.mark.parametrize("name", [FRAMING, CHECKSUM])
def test_row_with_a_field_named_like_the_framing_is_refused(name: str) -> None:
    with pytest.raises(ValueError, match=name):
        encode_body(UnknownRow.model_validate({"row": "later", name: 3}))


def test_framing_is_stripped_on_read_and_never_reaches_a_row_model(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    row = UnknownRow.model_validate({"row": "later", "note": "kept", "none": None})
    path.write_bytes(encode_batch(1, STAMP, [encode_body(row)]))
    read = read_journal(path)
    assert read.rows == [{"seq": 1, "at": STAMP, "row": "later", "note": "kept", "none": None}]
    (model,) = read.row_models()
    assert model.model_extra == {"note": "kept", "none": None}


def test_missing_journal_reads_as_empty(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    read = read_journal(tmp_path / "journal.jsonl")
    assert (read.rows, read.end, read.last_seq, read.torn) == ([], 0, 0, None)
    assert not _torn_warnings(caplog)


async def test_cut_at_any_byte_reads_back_a_prefix_of_whole_batches(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "journal.jsonl"
    ends = await _write_batches(path)
    data = path.read_bytes()
    full = read_journal(path).rows
    assert len(full) == sum(BATCH_SIZES)
    cut_path = tmp_path / "cut.jsonl"
    for cut in range(len(data) + 1):
        cut_path.write_bytes(data[:cut])
        caplog.clear()
        read = read_journal(cut_path)
        whole = sum(1 for end in ends if end <= cut)
        end = ends[whole - 1] if whole else 0
        rows = sum(BATCH_SIZES[:whole])
        assert (read.rows, read.end, read.last_seq) == (full[:rows], end, rows), cut
        if cut == end:
            assert read.torn is None, cut
            assert not _torn_warnings(caplog), cut
        else:
            assert read.torn is not None and read.torn.offset == end, cut
            (warning,) = _torn_warnings(caplog)
            assert str(cut_path) in warning.getMessage(), cut
            assert f"byte {end}" in warning.getMessage(), cut


def _damage_second_batch_first_line(lines: list[bytes]) -> list[bytes]:
    lines[1] = lines[1].replace(b'"seq"', b'"seq!', 1)
    return lines


def _drop_a_middle_line_of_the_second_batch(lines: list[bytes]) -> list[bytes]:
    del lines[2]
    return lines


def _zero_second_batch(lines: list[bytes]) -> list[bytes]:
    lines[1:4] = [b"\0" * sum(map(len, lines[1:4]))]
    return lines


def _seq_gap_at_second_batch(lines: list[bytes]) -> list[bytes]:
    lines[1:4] = [line.replace(b'"seq":', b'"seq":1', 1) for line in lines[1:4]]
    return lines


def _second_batch_not_an_object(lines: list[bytes]) -> list[bytes]:
    lines[1] = b"[2]\n"
    return lines


def _second_batch_boolean_seq(lines: list[bytes]) -> list[bytes]:
    lines[1] = b'{"seq":true,"commit_seq":4}\n'
    return lines


def _second_batch_mixes_batches(lines: list[bytes]) -> list[bytes]:
    lines[2] = lines[2].replace(b'"commit_seq":4', b'"commit_seq":3')
    return lines


def _merge_second_batch_into_the_third(lines: list[bytes]) -> list[bytes]:
    lines[3] = lines[3][:-1] + b"x"
    return lines


@pytest.mark.parametrize(
    "damage",
    [
        _damage_second_batch_first_line,
        _drop_a_middle_line_of_the_second_batch,
        _zero_second_batch,
        _seq_gap_at_second_batch,
        _second_batch_not_an_object,
        _second_batch_boolean_seq,
        _second_batch_mixes_batches,
        _merge_second_batch_into_the_third,
    ],
)
async def test_damage_in_the_middle_is_corruption_and_the_file_is_kept_as_it_is(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, damage: Any
) -> None:
    """Damage with whole rows of a later batch after it is never a torn tail:
    reading refuses, naming the file and the byte, and opening the journal to
    append refuses without truncating it."""
    path = tmp_path / "journal.jsonl"
    ends = await _write_batches(path)
    lines = path.read_bytes().splitlines(keepends=True)
    damaged = b"".join(damage(lines))
    path.write_bytes(damaged)
    caplog.clear()
    with pytest.raises(JournalCorruptError) as caught:
        read_journal(path)
    err = caught.value
    assert isinstance(err, RefusedError)
    assert err.path == path and ends[0] <= err.offset < ends[1]
    # Whole rows follow: at the latest, the third batch's.
    assert err.valid_at is not None
    assert err.offset < err.valid_at <= damaged.index(b'{"seq":5,')
    assert damaged[err.valid_at :].startswith(b'{"seq":')
    assert (len(err.intact.rows), err.intact.end, err.intact.last_seq) == (1, ends[0], 1)
    message = str(err)
    assert "\n" not in message and str(path) in message and f"byte {err.offset}" in message
    assert "kept as it is" in message
    with pytest.raises(JournalCorruptError):
        JournalFile.open(path)
    assert path.read_bytes() == damaged
    assert not _torn_warnings(caplog)


@pytest.mark.parametrize("line", [-3, -2, -1])
async def test_damage_in_any_line_of_the_last_batch_is_corruption_and_nothing_is_cut(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, line: int
) -> None:
    """A line that ends with its newline and fails its checksum is damage, not a
    write a crash cut, in the last batch too (its first, middle or last line):
    reading refuses with no rows after it to name, and nothing is cut."""
    path = tmp_path / "journal.jsonl"
    ends = await _write_batches(path)
    lines = path.read_bytes().splitlines(keepends=True)
    offset = sum(map(len, lines[:line]))
    lines[line] = lines[line].replace(b"proze", b"przze", 1)
    damaged = b"".join(lines)
    path.write_bytes(damaged)
    caplog.clear()
    with pytest.raises(JournalCorruptError) as caught:
        read_journal(path)
    err = caught.value
    assert (err.offset, err.reason) == (offset, "a line's checksum does not match")
    # Past the batch's first line its lines are its own; a damaged first line
    # leaves the lines after it read as rows that follow.
    after = None if line > -3 else offset + len(lines[line])
    assert err.valid_at == err.report()["valid_at"] == after
    assert (len(err.intact.rows), err.intact.end) == (sum(BATCH_SIZES[:-1]), ends[-2])
    with pytest.raises(JournalCorruptError):
        JournalFile.open(path)
    assert path.read_bytes() == damaged
    assert not _torn_warnings(caplog)


async def test_a_last_line_whose_newline_is_damaged_is_corruption(tmp_path: Path) -> None:
    """The last line whole, its newline changed to another byte: no write a crash
    cuts leaves a whole line with a byte after it."""
    path = tmp_path / "journal.jsonl"
    await _write_batches(path)
    data = path.read_bytes()
    path.write_bytes(data[:-1] + b"\x0b")
    with pytest.raises(JournalCorruptError) as caught:
        read_journal(path)
    assert caught.value.offset == data.rindex(b"\n", 0, len(data) - 1) + 1
    assert caught.value.reason == "a line's newline is damaged"
    assert caught.value.valid_at is None and "whole rows follow" not in str(caught.value)


async def test_what_a_crash_cut_leaves_after_the_last_newline_is_a_torn_tail(
    tmp_path: Path,
) -> None:
    """The last line without its newline (the cut fell just before it), or bytes
    after the last newline: a torn tail, the rows before it intact."""
    path = tmp_path / "journal.jsonl"
    ends = await _write_batches(path)
    data = path.read_bytes()
    for tail, end in ((data[:-1], ends[-2]), (data + b'{"seq":', ends[-1])):
        read = decode(tail, path)
        assert read.torn is not None and read.end == read.torn.offset == end
        assert read.torn.reason == "a line has no newline"


def test_torn_tail_message_is_one_line_naming_file_and_offset(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    torn = decode(b'{"seq":1', path).torn
    assert torn is not None
    assert "\n" not in torn.message
    assert str(path) in torn.message and "byte 0" in torn.message


def test_deeply_nested_garbage_is_damage_or_a_torn_tail_not_a_crash(tmp_path: Path) -> None:
    """Garbage that ends with a newline is damage; without one, a torn tail."""
    with pytest.raises(JournalCorruptError):
        decode(b"[" * 100_000 + b"\n", tmp_path / "journal.jsonl")
    read = decode(b"[" * 100_000, tmp_path / "journal.jsonl")
    assert read.rows == [] and read.torn is not None


def test_open_truncates_a_torn_tail_and_continues_after_the_last_whole_batch(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "journal.jsonl"
    whole = encode_batch(1, STAMP, [encode_body(Started(pid=1)), encode_body(Started(pid=2))])
    torn = encode_batch(3, STAMP, [encode_body(Started(pid=3)), encode_body(Started(pid=4))])
    path.write_bytes(whole + torn[:-5])
    journal = JournalFile.open(path)
    try:
        assert journal.last_seq == 2
        assert path.read_bytes() == whole
        assert len(_torn_warnings(caplog)) == 1
        journal.append(encode_batch(3, STAMP, [encode_body(Started(pid=5))]), 1)
    finally:
        journal.close()
    caplog.clear()
    read = read_journal(path)
    assert [row["pid"] for row in read.rows] == [1, 2, 5]
    assert read.torn is None and not _torn_warnings(caplog)


# A journal an older crw wrote: the same framing without the checksum, commit_seq last.
LEGACY = (
    b'{"seq":1,"at":"2026-11-29T19:35:51Z","row":"started","backend":"session","commit_seq":1}\n'
    b'{"seq":2,"at":"2026-11-29T19:35:52Z","row":"prepared","call":"a.1","commit_seq":3}\n'
    b'{"seq":3,"at":"2026-11-29T19:35:52Z","row":"completed","call":"a.1","commit_seq":3}\n'
)


def test_a_journal_an_older_crw_wrote_reads_back_and_goes_on_checksummed(tmp_path: Path) -> None:
    """Runs started before lines carried a checksum are neither torn nor corrupt: they
    read back whole, and the writer goes on after them with checksummed lines."""
    path = tmp_path / "journal.jsonl"
    path.write_bytes(LEGACY)
    read = read_journal(path)
    assert [row["row"] for row in read.rows] == ["started", "prepared", "completed"]
    assert read.torn is None and read.end == len(LEGACY) and read.last_seq == 3
    journal = JournalFile.open(path)
    try:
        journal.append(encode_batch(4, STAMP, [encode_body(Started(pid=5))]), 1)
    finally:
        journal.close()
    assert path.read_bytes().startswith(LEGACY)
    assert [row.get("pid") for row in read_journal(path).rows] == [None, None, None, 5]


def test_a_line_without_checksum_after_a_checksummed_one_is_damage(tmp_path: Path) -> None:
    """Only the lines before the first checksummed one may lack the checksum: after it,
    a line that does is damage (here with a whole row after it: corruption)."""
    path = tmp_path / "journal.jsonl"
    checked = encode_batch(4, STAMP, [encode_body(Started(pid=4))])
    plain = b'{"seq":5,"at":"2026-11-29T19:35:53Z","row":"started","commit_seq":5}\n'
    after = encode_batch(6, STAMP, [encode_body(Started(pid=6))])
    path.write_bytes(LEGACY + checked + plain + after)
    with pytest.raises(JournalCorruptError) as refused:
        read_journal(path)
    assert refused.value.offset == len(LEGACY + checked)
    assert path.read_bytes() == LEGACY + checked + plain + after


def _checksummed(head: bytes) -> bytes:
    """A line whose checksum matches `head`, its bytes before `,"crc":`."""
    return head + b',"%s":"%08x"}\n' % (CHECKSUM.encode(), zlib.crc32(head))


def _head(line: bytes) -> bytes:
    return line[: line.rindex(b',"%s":' % CHECKSUM.encode())]


def _reframe(lines: list[bytes], index: int, old: bytes, new: bytes) -> list[bytes]:
    lines[index] = _checksummed(_head(lines[index]).replace(old, new, 1))
    return lines


@pytest.mark.parametrize(
    "damage",
    [
        lambda lines: _reframe(lines, 1, b'{"seq":2', b'{"seq":true'),
        lambda lines: _reframe(lines, 2, b'{"seq":3', b'{"seq":13'),
        lambda lines: _reframe(
            lines, 2, b'"%s":4' % FRAMING.encode(), b'"%s":3' % FRAMING.encode()
        ),
        lambda lines: _reframe(
            lines, 3, b'"%s":4' % FRAMING.encode(), b'"%s":2' % FRAMING.encode()
        ),
        lambda lines: _reframe(lines, 1, b'{"seq":2,', b'{"seq":2,"x":[1,'),
        lambda lines: _reframe(lines, 1, b'{"seq":2,', b'{"seq":2,"x":[1,\n2],'),
        lambda lines: [
            *lines[:2],
            _checksummed(_head(lines[2]) + b"}," + _head(lines[3])),
            *lines[4:],
        ],
        lambda lines: lines[:-1],
    ],
    ids=[
        "boolean seq",
        "seq gap",
        "mixed batches",
        "commit_seq before seq",
        "not JSON",
        "a newline inside a checksum",
        "two rows a line",
        "last batch unclosed",
    ],
)
@pytest.mark.parametrize("piece", [None, 1], ids=["pieces", "a piece a line"])
async def test_checksummed_lines_with_bad_framing_read_as_a_line_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, damage: Any, piece: int | None
) -> None:
    """Lines whose checksums match but whose framing does not (what only a bug or a
    hand edit writes) are read exactly as the line-at-a-time reader reads them: the
    read of whole batches a piece at a time never takes a batch that reader would
    stop at, from bytes or from the file, a batch cut across pieces too."""
    from crw.journal.log import _decode_lines

    if piece is not None:
        monkeypatch.setattr(framing, "PIECE", piece)  # each line a piece
    path = tmp_path / "journal.jsonl"
    await _write_batches(path)
    data = b"".join(damage(path.read_bytes().splitlines(keepends=True)))

    def outcome(read: Any) -> Any:
        try:
            got = read(data, path, 0)
        except JournalCorruptError as err:
            return str(err)
        return got.rows, got.end, got.last_seq, got.torn

    assert outcome(lambda d, p, a: decode(d, p, after=a)) == outcome(_decode_lines)
    assert outcome(_decode_lines) != outcome(lambda d, p, a: decode(path.read_bytes(), p))
    path.write_bytes(data)
    assert outcome(lambda d, p, a: read_journal(p)) == outcome(_decode_lines)


async def test_whole_batches_are_parsed_a_piece_at_a_time_and_no_collection(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reading a journal as the writer leaves it parses its lines a piece of about
    `PIECE` bytes at a time (not a parse a line), and the garbage collector passes
    over the rows it builds once, when the read is done (not every few hundred
    objects, as they are made): the two costs that made reading back 100,000 rows
    slow."""
    import gc

    path = tmp_path / "journal.jsonl"
    data = b"".join(encode_batch(seq, STAMP, [encode_body(_row(seq, 0))]) for seq in range(1, 3001))
    path.write_bytes(data)
    parses = count_parses(monkeypatch)
    passes: list[str] = []

    def collecting(phase: str, info: dict[str, Any]) -> None:
        passes.append(phase)

    gc.callbacks.append(collecting)
    try:
        read = read_journal(path)
    finally:
        gc.callbacks.remove(collecting)
    assert read.last_seq == 3000 and read.torn is None
    assert [row["pid"] for row in read.rows[:2]] == [10, 20]
    assert 1 < len(parses) <= len(data) // framing.PIECE + 1, parses
    assert passes.count("start") <= 1, passes.count("start")
    assert gc.isenabled()


def _pieces_journal() -> bytes:
    """Batches of 1 to 4 rows, one of them a completed row whose result is a span
    of its raw_text and one a line longer than a piece of `_SMALL_PIECE` bytes."""
    rows: list[RowModel] = [_row(n, 0) for n in range(60)]
    rows[7] = Completed(
        call="c7",
        raw_text='Done.\n{"files": ["a.py"]}',
        result_span=[6, 25],
        result={"files": ["a.py"]},
    )
    rows[30] = UnknownRow.model_validate({"row": "note", "text": "long " * 200})
    data, seq = b"", 1
    for size in cycle(BATCH_SIZES):
        if not rows:
            return data
        batch, rows = rows[:size], rows[size:]
        data += encode_batch(seq, STAMP, [encode_body(row) for row in batch])
        seq += len(batch)
    raise AssertionError


_SMALL_PIECE = 300
"""Bytes a piece in the tests of pieces: a few lines, a batch cut across two."""


class _Reads:
    """Each `os.read` from now on: how many bytes it asked for."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.sizes: list[int] = []
        read = os.read

        def reading(fd: int, size: int) -> bytes:
            self.sizes.append(size)
            return read(fd, size)

        monkeypatch.setattr(os, "read", reading)


def test_a_journal_of_whole_batches_is_read_a_piece_at_a_time_never_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A journal of whole batches is read from its file a piece at a time, each
    piece checked and parsed before the next is read: no copy of the whole file is
    made (28 MB for 100,000 rows), and the rows, end and last seq are the
    line-at-a-time reader's, across pieces that cut batches and lines, a result
    span's row among them."""
    from crw.journal.log import _decode_lines

    monkeypatch.setattr(framing, "PIECE", _SMALL_PIECE)
    path = tmp_path / "journal.jsonl"
    data = _pieces_journal()
    path.write_bytes(data)
    lines = count_decoded_lines(monkeypatch)
    reads = _Reads(monkeypatch)
    read = read_journal(path)
    decoded = len(lines)
    expected = _with_results(_decode_lines(data, path, 0))
    assert (read.rows, read.end, read.last_seq, read.torn) == (
        expected.rows,
        len(data),
        60,
        None,
    )
    assert read.rows[7]["result"] == {"files": ["a.py"]}
    assert decoded == 60  # each line once, parsed with its piece
    assert reads.sizes and max(reads.sizes) == _SMALL_PIECE, reads.sizes
    assert len(reads.sizes) > len(data) // _SMALL_PIECE


def _outcome(read: Any, *args: Any) -> Any:
    """What a read gives, a result span's row with its result (which the readers
    give it, the line-at-a-time reader's caller)."""
    try:
        got = read(*args)
    except JournalCorruptError as err:
        return str(err), _with_results(err.intact).rows, err.intact.end
    return _with_results(got).rows, got.end, got.last_seq, got.torn


def test_in_pieces_every_cut_and_damaged_byte_reads_as_a_line_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Read a piece at a time, from the file or from its bytes, a journal cut at any
    byte, or with any byte changed or a newline inserted anywhere, reads exactly as
    the line-at-a-time reader reads it: the same rows, end and torn tail, or the
    same corruption. A batch or a line cut across two pieces is whole only when
    every piece of it is."""
    from crw.journal.log import _decode_lines

    monkeypatch.setattr(framing, "PIECE", _SMALL_PIECE)
    path = tmp_path / "journal.jsonl"
    data = _pieces_journal()[:1400]
    data = data[: data.rindex(b"\n") + 1]
    damaged = [data[:cut] for cut in range(len(data))]
    for at in range(len(data)):
        damaged.append(data[:at] + bytes([data[at] ^ 1]) + data[at + 1 :])
        damaged.append(data[:at] + b"\n" + data[at:])
    for bytes_ in damaged:
        path.write_bytes(bytes_)
        expected = _outcome(_decode_lines, bytes_, path, 0)
        assert _outcome(read_journal, path) == expected, bytes_
        assert _outcome(decode, bytes_, path) == expected, bytes_


def _with_results(read: Any) -> Any:
    with_results(read.rows)
    return read


def _rows_journal(path: Path, rows: int) -> list[dict[str, Any]]:
    """A journal of `rows` rows, one a batch, that hold numbers and text of every
    kind a row can: the rows a line-at-a-time read of it gives."""
    bodies = [
        UnknownRow.model_validate(
            {"row": "note", "n": seq, "big": 2**70 + seq, "x": seq / 7, "text": f"žluť {seq}"}
        )
        for seq in range(1, rows + 1)
    ]
    data = b"".join(encode_batch(seq, STAMP, [encode_body(b)]) for seq, b in enumerate(bodies, 1))
    path.write_bytes(data)
    rows_read = [json.loads(line) for line in data.splitlines()]
    for row in rows_read:
        del row[FRAMING], row[CHECKSUM]
    return rows_read


def test_whole_batches_are_parsed_by_pydantic_core_in_a_process_that_has_loaded_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process that writes rows has pydantic-core loaded (the row models): a read
    of whole batches there parses them once with its parser (40% less time than
    `json` on 100,000 rows), into the same rows, integers past 64 bits exact."""
    path = tmp_path / "journal.jsonl"
    rows = _rows_journal(path, 500)
    parses = count_parses(monkeypatch)
    read = read_journal(path)
    assert parses and set(parses) == {"pydantic_core"}  # a parse a piece
    assert read.rows == rows and read.last_seq == 500 and read.torn is None
    assert read.rows[-1]["big"] == 2**70 + 500


def test_a_process_without_pydantic_core_reads_the_same_rows_with_json(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`next` and `status` do not load pydantic-core to read a journal: they parse it
    with `json`, into the same rows."""
    import sys

    path = tmp_path / "journal.jsonl"
    rows = _rows_journal(path, 500)
    parses = count_parses(monkeypatch)
    monkeypatch.delitem(sys.modules, "pydantic_core")
    read = read_journal(path)
    assert parses and set(parses) == {"json"}
    assert read.rows == rows and read.last_seq == 500


def test_what_pydantic_core_refuses_json_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The escape of a lone surrogate (text that is not valid Unicode) is refused by
    pydantic-core's parser: the read parses the batches again with `json`, which
    reads it exactly, rather than reading them a line at a time."""
    path = tmp_path / "journal.jsonl"
    rows = _rows_journal(path, 20)
    lone = UnknownRow.model_validate({"row": "note", "text": "a\ud800b"})
    with path.open("ab") as file:
        file.write(encode_batch(21, STAMP, [encode_body(lone)]))
    parses = count_parses(monkeypatch)
    read = read_journal(path)
    assert parses == ["pydantic_core", "json"]
    assert read.rows[:20] == rows and read.rows[20]["text"] == "a\ud800b"
