"""Damage to the journal of a finished run: a torn tail or corruption, never a silent loss.

A truncation at any byte of a real journal, what a crash leaves, reads back the
rows of the whole batches before it, dropping a torn tail and saying so. Every
single-byte change or insertion is refused as corrupt with those same rows
intact, wherever it is, in the last line and the last batch too: only bytes
added after the journal's last newline read as a torn tail (a line with no
newline), and then every row stays. A run that ended never reads as one that
did not.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from itertools import cycle
from pathlib import Path
from typing import Any

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st
from trio.testing import MockClock

from crw.actors.journal_writer import open_journal_writer
from crw.clock import fixed_clock
from crw.journal.log import FRAMING, JournalCorruptError, JournalRead, decode, read_journal
from crw.journal.replay import replay
from tests.actors.test_app_server_run import harness

PATH = Path("journal.jsonl")
REBATCH = (1, 3, 2, 4)


async def _finished_run(tmp: Path) -> bytes:
    async with harness(tmp) as ran:
        state, _ = await ran.run()
    assert state == "ended"
    return (ran.run_dir / "journal.jsonl").read_bytes()


async def _rebatched(original: Path, path: Path) -> bytes:
    """The same rows committed again in batches of several rows."""
    models = read_journal(original).row_models()
    async with open_journal_writer(path, clock=fixed_clock()) as journal:
        sizes = cycle(REBATCH)
        while models:
            size = next(sizes)
            await journal.commit(models[:size])
            models = models[size:]
    return await trio.Path(path).read_bytes()


@dataclass(frozen=True)
class Journal:
    """A journal's bytes, its rows, and (end offset, rows so far) of each batch."""

    data: bytes
    rows: list[dict[str, Any]]
    ends: list[tuple[int, int]]


pytestmark = pytest.mark.xdist_group("test_damage")
"""One xdist worker runs the whole module: its tests share the module's costly set-up."""


@pytest.fixture(scope="module", params=["one_row_batches", "several_row_batches"])
def journal(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Journal:
    """The journal of the app-server backend's chain workflow run to its end."""
    tmp = tmp_path_factory.mktemp("run")
    data = trio.run(_finished_run, tmp, clock=MockClock(autojump_threshold=0))
    if request.param == "several_row_batches":
        data = trio.run(_rebatched, tmp / "run" / "journal.jsonl", tmp / "rebatched.jsonl")
    rows = decode(data, PATH).rows
    ends = _batch_ends(data)
    assert ends[-1] == (len(data), len(rows))
    return Journal(data, rows, ends)


def _batch_ends(data: bytes) -> list[tuple[int, int]]:
    """(byte offset just past the batch, rows up to and with it) of each batch."""
    ends, pos = [], 0
    for rows, line in enumerate(data.splitlines(keepends=True), start=1):
        pos += len(line)
        framed = json.loads(line)
        if framed["seq"] == framed[FRAMING]:
            ends.append((pos, rows))
    return ends


def _check(original: Journal, damaged: bytes, at: int, *, cut: bool) -> None:
    """The damage at byte `at` of `original` made `damaged`: what reading it gives.
    A cut is what a crash leaves; any other damage to a line that ends with its
    newline, the last line too, is corruption. Whatever reads back of a run that
    ended keeps its ended row (no process may start it again) unless a cut took it."""
    before = [(end, rows) for end, rows in original.ends if end <= at]
    end, kept = before[-1] if before else (0, 0)
    try:
        read = decode(damaged, PATH)
    except JournalCorruptError as err:
        assert not cut, "a crash cut is a torn tail, never corruption"
        _read_prefix(original, err.intact, kept)
        # The damaged line starts at or before the byte, or just after it when an
        # inserted newline ended the line before; the rows that follow, when any
        # do, may start at the byte itself, when a `{` inserted before a line's own
        # opens a whole row.
        assert err.offset <= at + 1
        assert err.valid_at is None or at <= err.valid_at
        return
    got = _read_prefix(original, read, kept)
    if cut:
        assert got == kept and (read.torn is None) == (at == end)
        return
    assert got == len(original.rows), "damage read back as a torn tail"
    assert at == len(original.data) and read.torn is not None, "damage read back as rows"
    assert replay(read.rows).ended_status == "completed", "an ended run read as not ended"


def _read_prefix(original: Journal, read: JournalRead, kept: int) -> int:
    """The rows read are the journal's first rows, each whole batch before the
    damage among them, and `end` is just past them; how many there are. One batch
    more is whole when a newline inserted just before a line's own ends it."""
    got = len(read.rows)
    assert got >= kept, "a row before the damage was lost"
    assert read.rows == original.rows[:got], "a row read back is not the one written"
    assert read.end == {0: 0, **{rows: end for end, rows in original.ends}}[got]
    return got


def _changed(data: bytes, at: int, byte: int) -> bytes:
    return data[:at] + bytes([byte]) + data[at + 1 :]


def _inserted(data: bytes, at: int, byte: int) -> bytes:
    return data[:at] + bytes([byte]) + data[at:]


def test_every_single_bit_flip_is_corruption_in_the_last_line_too(journal: Journal) -> None:
    data = journal.data
    for at in range(len(data)):
        for bit in (0x01, 0x80):
            _check(journal, _changed(data, at, data[at] ^ bit), at, cut=False)


def test_a_digit_of_any_lines_at_changed_is_corruption_the_ended_line_too(
    journal: Journal,
) -> None:
    """One digit of a line's `at` changed, as a stray edit does, on every line: each
    line of the last batch and the run's closing ended line too. The journal is
    corrupt at that line, with every whole batch before it intact; never a torn
    tail that would leave the ended run to be started again."""
    offset = 0
    for line in journal.data.splitlines(keepends=True):
        at = offset + line.index(b'"at":"') + len(b'"at":"') + 3  # the year's last digit
        digit = journal.data[at] - ord("0")
        assert 0 <= digit <= 9
        damaged = _changed(journal.data, at, ord("0") + (digit + 1) % 10)
        with pytest.raises(JournalCorruptError) as caught:
            decode(damaged, PATH)
        err = caught.value
        kept = max([rows for end, rows in journal.ends if end <= offset], default=0)
        assert err.offset == offset and err.reason == "a line's checksum does not match"
        assert err.intact.rows == journal.rows[:kept]
        offset += len(line)
    assert json.loads(line)["row"] == "ended"


def test_a_cut_at_any_byte_is_a_torn_tail(journal: Journal) -> None:
    for at in range(len(journal.data) + 1):
        _check(journal, journal.data[:at], at, cut=True)


@settings(max_examples=400, deadline=None)
@given(data=st.data())
def test_any_single_byte_change_insertion_or_cut_loses_nothing_silently(
    journal: Journal, data: st.DataObject
) -> None:
    original = journal.data
    kind = data.draw(st.sampled_from(["change", "insert", "cut"]))
    at = data.draw(st.integers(0, len(original) - (kind == "change")))
    if kind == "cut":
        _check(journal, original[:at], at, cut=True)
        return
    byte = data.draw(st.integers(0, 255))
    if kind == "change":
        byte = byte if byte != original[at] else byte ^ 0xFF
        _check(journal, _changed(original, at, byte), at, cut=False)
    else:
        _check(journal, _inserted(original, at, byte), at, cut=False)


@pytest.mark.parametrize("byte", [b"{", b"\n"])
def test_a_framing_byte_inserted_anywhere_loses_nothing_silently(
    journal: Journal, byte: bytes
) -> None:
    """The bytes that open a row and end a line, inserted at every offset: the
    cases a sample can miss (a `{` before a line's own opens a whole row)."""
    for at in range(len(journal.data) + 1):
        _check(journal, _inserted(journal.data, at, byte[0]), at, cut=False)
