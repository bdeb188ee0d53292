"""The journal file: its lines, its framing, and reading it back after a crash."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
import trio

from crw.actors.journal_writer import open_journal_writer
from crw.clock import fixed_clock
from crw.journal.log import (
    FRAMING,
    JournalFile,
    decode,
    encode_batch,
    encode_body,
    read_journal,
)
from crw.journal.rows import RowModel, Started, UnknownRow

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


def _torn_warnings(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "crw.journal" and r.levelno == logging.WARNING]


def test_line_is_seq_at_row_call_then_fields_then_framing() -> None:
    row = Started(call="c1", backend="codex", pid=7)
    line = encode_batch(1, STAMP, [encode_body(row)])
    assert line == (
        b'{"seq":1,"at":"2026-11-29T19:35:51.123456Z","row":"started","call":"c1",'
        b'"backend":"codex","pid":7,"commit_seq":1}\n'
    )


def test_every_line_of_a_batch_names_the_seq_of_its_last_row() -> None:
    bodies = [encode_body(Started(pid=i)) for i in range(3)]
    lines = [json.loads(line) for line in encode_batch(5, STAMP, bodies).splitlines()]
    assert [(line["seq"], line[FRAMING]) for line in lines] == [(5, 7), (6, 7), (7, 7)]


def test_row_without_fields_still_encodes_to_a_json_object() -> None:
    line = encode_batch(1, STAMP, [encode_body(RowModel())])
    assert json.loads(line) == {"seq": 1, "at": STAMP, FRAMING: 1}


def test_seq_and_at_of_the_row_are_the_writers_not_the_rows() -> None:
    body = encode_body(Started(seq=99, at="yesterday", pid=1))
    assert json.loads(encode_batch(3, STAMP, [body])) == {
        "seq": 3,
        "at": STAMP,
        "row": "started",
        "pid": 1,
        FRAMING: 3,
    }


def test_text_is_written_as_utf8_and_a_lone_surrogate_is_refused() -> None:
    assert encode_body(Started(process="prozeß")) == '"row":"started","process":"prozeß"'.encode()
    with pytest.raises(ValueError):
        encode_body(Started(process="bad \udcff name"))


def test_row_with_a_field_named_like_the_framing_is_refused() -> None:
    with pytest.raises(ValueError, match=FRAMING):
        encode_body(UnknownRow.model_validate({"row": "later", FRAMING: 3}))


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
    ],
)
async def test_damage_in_the_middle_drops_everything_from_the_damaged_batch_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, damage: Any
) -> None:
    path = tmp_path / "journal.jsonl"
    ends = await _write_batches(path)
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(damage(lines)))
    caplog.clear()
    read = read_journal(path)
    assert (len(read.rows), read.end, read.last_seq) == (1, ends[0], 1)
    assert read.torn is not None and read.torn.offset == ends[0]
    assert len(_torn_warnings(caplog)) == 1


def test_torn_tail_message_is_one_line_naming_file_and_offset(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    torn = decode(b'{"seq":1', path).torn
    assert torn is not None
    assert "\n" not in torn.message
    assert str(path) in torn.message and "byte 0" in torn.message


def test_deeply_nested_garbage_is_a_torn_tail_not_a_crash(tmp_path: Path) -> None:
    read = decode(b"[" * 100_000 + b"\n", tmp_path / "journal.jsonl")
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
