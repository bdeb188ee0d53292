"""An answer whose JSON holds a lone surrogate (the escape `"\\ud800"`, which a
model may write) never crashes the run: the call completes with it, its rows read
back exactly, and the next call's task carries U+FFFD in its place."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from trio.testing import MockClock

from tests.actors import test_app_server_run, test_session_run

TEXT = 'Found \u202ethem\u202c:\n{"files": ["a\\ud800.py", "b\\udc80", "\\u0000"]}'
"""A subagent's answer: prose with a bidi override, then JSON whose strings hold
two lone surrogates and a NUL as escapes."""


async def app_server(tmp_path: Path) -> tuple[str, list[dict[str, Any]], Path]:
    async with test_app_server_run.harness(tmp_path) as h:
        await h.script({"marker": "explore.1/*"}, text=TEXT)
        state, rows = await h.run()
    return state, rows, h.run_dir / "journal.jsonl"


async def session(tmp_path: Path) -> tuple[str, list[dict[str, Any]], Path]:
    async with test_session_run.harness(tmp_path) as h:
        await h.script({"marker": "explore.1/*"}, text=TEXT)
        state, rows = await h.go()
    return state, rows, h.run.journal


@pytest.mark.parametrize("backend", [app_server, session])
async def test_an_answer_holding_a_lone_surrogate_completes_and_reads_back(
    tmp_path: Path, autojump_clock: MockClock, backend: Any
) -> None:
    state, rows, journal_path = await backend(tmp_path)
    assert state == "ended"
    end = test_app_server_run.terminal(rows, "explore.1")
    assert end["row"] == "completed" and end["extracted"] is True
    assert end["result"] == {"files": ["a\ud800.py", "b\udc80", "\x00"]}
    assert end["raw_text"] == TEXT
    assert test_app_server_run.kinds(rows, "build.1")[-1] == "completed"
    journal = written(journal_path)
    journal.decode("utf-8")  # every line UTF-8, the surrogates as their escapes
    assert b"\\ud800" in journal and b"\\udc80" in journal
    step = next(r for r in rows if r.get("call") == "build.1" and r["row"] == "step_published")
    task = written(Path(step["packet"])).decode() if step.get("packet") else step["input"]
    assert '["a\ufffd.py", "b\ufffd", "\\u0000"]' in task


def written(path: Path) -> bytes:
    """What a run wrote to `path` (the journal; a session step's packet)."""
    return path.read_bytes()
