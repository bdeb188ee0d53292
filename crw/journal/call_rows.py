"""The rows of one call, read from a journal without decoding the others.

The journal has no index by call. A call's rows are found by their bytes: a row
that names the call has `"call":"<call>"` in its line, and only there (a quote
inside a JSON string is escaped, so no string can hold those bytes); a session
wake or escalation names the call's steps in its `ops` (`"<call>/t`); a
delivery names its wake's id. Only the lines that hold one of these are parsed,
each checked against its checksum, framing stripped, a spanned result put back
(`result_span`): the other rows of a 10,000-call run cost a byte search, not a
parse. The bytes read are the journal's whole batches, up to `end` (a read's
`JournalRead.end`), so a torn tail is never read.
"""

from __future__ import annotations

import json
import mmap
from pathlib import Path
from typing import Any

from crw.journal.file_store import FileJournal
from crw.journal.framing import CHECKSUM, FRAMING, whole_line
from crw.journal.result_span import with_results
from crw.journal.stores import store_at

Buffer = mmap.mmap | bytes
"""The journal's bytes: the file mapped, or a database's read."""


def call_rows(journal: Path, call: str, end: int) -> list[dict[str, Any]]:
    """The rows among the first `end` bytes of `journal` that belong to `call`, in
    journal order: those that name it, the session wakes and escalations whose
    `ops` name its steps, and the deliveries of those wakes.

    Raises:
        OSError: the journal cannot be read.
    """
    if end <= 0:
        return []
    store = store_at(journal)
    if isinstance(store, FileJournal):
        with (
            journal.open("rb") as file,
            mmap.mmap(file.fileno(), end, access=mmap.ACCESS_READ) as data,
        ):
            mine = _found(data, call, end)
    else:  # a database's journal: its bytes, as the file would hold them
        mine = _found(store.read_from(0)[:end], call, end)
    with_results(mine)
    return mine


def _found(data: Buffer, call: str, end: int) -> list[dict[str, Any]]:
    # One needle for both: `"call":"<call>"` and `"<call>/t…` (an op, a marker)
    # each hold `"<call>`; a call whose id it begins (build.10 of build.1) is left
    # out once its line is parsed.
    name = json.dumps(call, ensure_ascii=False).encode()
    mine = [row for row in _rows_with(data, [name[:-1]], end) if _belongs(row, call)]
    wakes = {
        row["wake_id"]
        for row in mine
        if row.get("row") == "session_wake" and isinstance(row.get("wake_id"), str)
    }
    if wakes:
        ids = [b'"wake_id":' + json.dumps(w, ensure_ascii=False).encode() for w in wakes]
        known = {row.get("seq") for row in mine}
        mine += [
            row
            for row in _rows_with(data, ids, end)
            if row.get("row") == "message_delivery" and row.get("seq") not in known
        ]
        mine.sort(key=lambda row: int(row.get("seq") or 0))
    return mine


def _rows_with(data: Buffer, needles: list[bytes], end: int) -> list[dict[str, Any]]:
    """The whole, checksummed lines of `data[:end]` that hold any of `needles`,
    parsed, in order (a line that fails its checksum is left out: the journal's
    reader reports damage, this one only looks)."""
    lines: dict[int, int] = {}
    for needle in needles:
        at = data.find(needle, 0, end)
        while at >= 0:
            start = data.rfind(b"\n", 0, at) + 1
            newline = data.find(b"\n", at, end)
            if newline < 0:
                break
            lines[start] = newline
            at = data.find(needle, newline, end)
    rows = []
    for start in sorted(lines):
        line = data[start : lines[start] + 1]
        obj = whole_line(line, memoryview(line), 0, len(line) - 1, legacy=True)
        if isinstance(obj, dict):
            obj.pop(FRAMING, None)
            obj.pop(CHECKSUM, None)
            rows.append(obj)
    return rows


def _belongs(row: dict[str, Any], call: str) -> bool:
    if row.get("call") is not None:
        return bool(row.get("call") == call)
    prefix = f"{call}/t"
    op = row.get("op")
    if isinstance(op, str) and op.startswith(prefix):
        return True
    ops = row.get("ops")
    return isinstance(ops, list) and any(isinstance(o, str) and o.startswith(prefix) for o in ops)
