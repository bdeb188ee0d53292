"""An answer whose JSON holds a lone surrogate (the escape `"\\ud800"`, which a
model may write) never crashes the run: the call completes with it, its rows read
back exactly, and the next call's task carries U+FFFD in its place."""

from __future__ import annotations

from pathlib import Path

from trio.testing import MockClock

from tests.actors.test_app_server_run import harness, kinds, terminal


async def test_an_answer_holding_a_lone_surrogate_completes_and_reads_back(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    text = 'Found \u202ethem\u202c:\n{"files": ["a\\ud800.py", "b\\udc80", "\\u0000"]}'
    async with harness(tmp_path) as h:
        await h.script({"marker": "explore.1/*"}, text=text)
        state, rows = await h.run()
    assert state == "ended"
    end = terminal(rows, "explore.1")
    assert end["row"] == "completed" and end["extracted"] is True
    assert end["result"] == {"files": ["a\ud800.py", "b\udc80", "\x00"]}
    assert end["raw_text"] == text
    assert kinds(rows, "build.1")[-1] == "completed"
    journal = (h.run_dir / "journal.jsonl").read_bytes()
    journal.decode("utf-8")  # every line UTF-8, the surrogates as their escapes
    assert b"\\ud800" in journal and b"\\udc80" in journal
    step = next(r for r in rows if r.get("call") == "build.1" and r["row"] == "step_published")
    assert '["a\ufffd.py", "b\ufffd", "\\u0000"]' in step["input"]
