"""One call's rows read out of a journal by their bytes: every row that names the
call, the wakes and escalations whose ops name its steps and those wakes'
deliveries; never another call's, never a row past the read's end."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from crw.journal.call_rows import call_rows
from crw.journal.log import encode_batch, encode_body, read_journal
from crw.journal.rows import UnknownRow


def write(path: Path, rows: list[dict[str, Any]]) -> None:
    with open(path, "ab") as journal:
        for seq, row in enumerate(rows, start=1):
            body = encode_body(UnknownRow.model_validate(row))
            journal.write(encode_batch(seq, f"2026-12-06T10:00:{seq:02d}.000000Z", [body]))


ROWS: list[dict[str, Any]] = [
    {"row": "started", "backend": "session"},
    {"row": "prepared", "call": "a.1", "node": "a"},
    {"row": "prepared", "call": "a.10", "node": "a"},
    {"row": "step_published", "call": "a.1", "k": 1, "op": "a.1/t1", "marker": "a.1/t1-a1"},
    {"row": "step_published", "call": "a.10", "k": 1, "op": "a.10/t1"},
    {"row": "session_wake", "ops": ["a.10/t1", "a.1/t1"], "wake_id": "run:r/b-1"},
    {"row": "session_wake", "ops": ["a.10/t1"], "wake_id": "run:r/b-2"},
    {"row": "message_delivery", "wake_id": "run:r/b-1", "status": "delivered"},
    {"row": "message_delivery", "wake_id": "run:r/b-2", "status": "delivered"},
    {"row": "escalation", "ops": ["a.1/t1"], "reason": "unresponsive"},
    {
        "row": "completed",
        "call": "a.10",
        "result": {"note": 'the "call":"a.1" of it'},
        "k": 1,
    },
    {
        "row": "completed",
        "call": "a.1",
        "raw_text": 'Done: {"ok": true}',
        "result_span": [6, 18],
        "result": {"ok": True},
        "k": 1,
    },
    {"row": "ended", "status": "completed"},
]


def test_the_rows_of_one_call_and_no_other(tmp_path: Path) -> None:
    journal = tmp_path / "journal.jsonl"
    write(journal, ROWS)
    read = read_journal(journal)
    rows = call_rows(journal, "a.1", read.end)
    assert [row["seq"] for row in rows] == [2, 4, 6, 8, 10, 12]
    assert "commit_seq" not in rows[0] and "crc" not in rows[0]
    assert rows[-1]["result"] == {"ok": True}  # put back from its span
    assert rows == [row for row in read.rows if row["seq"] in (2, 4, 6, 8, 10, 12)]


def test_rows_past_the_end_are_not_read(tmp_path: Path) -> None:
    journal = tmp_path / "journal.jsonl"
    write(journal, ROWS[:4])
    end = read_journal(journal).end
    with open(journal, "ab") as file:
        file.write(b'{"seq":5,"row":"held","call":"a.1"')  # a torn tail
    assert [row["seq"] for row in call_rows(journal, "a.1", end)] == [2, 4]
    assert call_rows(journal, "a.1", 0) == []


def test_a_run_with_no_journal_yet_has_no_rows(tmp_path: Path) -> None:
    assert call_rows(tmp_path / "journal.jsonl", "a.1", 0) == []
