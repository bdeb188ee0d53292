"""A plain completed call's rows say each thing once (the journal stays
proportionate to the calls)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from trio.testing import MockClock

from tests.actors.test_app_server_run import harness

FRAMING = {"seq", "at", "row", "call", "commit_seq", "crc"}
SHORT = 12
"""Texts this long or shorter (an enum such as a backend's name) are not counted."""


def texts(value: Any) -> Iterator[str]:
    """Every string a row's member holds, at any depth."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for member in value.values():
            yield from texts(member)
    elif isinstance(value, list):
        for member in value:
            yield from texts(member)


def repeated(rows: list[dict[str, Any]]) -> dict[str, int]:
    """The texts longer than SHORT written more than once in the rows, framing
    members aside."""
    seen = Counter(
        text
        for row in rows
        for key, value in row.items()
        if key not in FRAMING
        for text in texts(value)
    )
    return {text: n for text, n in seen.items() if n > 1 and len(text) > SHORT}


async def test_a_plain_completed_app_server_call_writes_each_text_once(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: STEP-7, BIND-1 (host_cwd is the cwd the host reports when it is not P:
    a thread started in P reports P, already the row's cwd), STEP-58, STEP-57 (the
    step's intent journals the turn's input and names its marker)"""
    async with harness(tmp_path) as h:
        _, rows = await h.run()
    call = [row for row in rows if row.get("call") == "explore.1"]
    assert [row["row"] for row in call] == [
        "prepared",
        "step_published",
        "thread_started",
        "turn_started",
        "completed",
    ]
    workspace = call[0]["allocation"]["workspace"]
    # P: the call's allocation, and the cwd its thread was bound with; the marker:
    # the step's, the bind's and its turn's (each row is read alone on replay).
    assert repeated(call) == {workspace: 2, "explore.1/t1-a1": 3}
    assert "host_cwd" not in call[2]
