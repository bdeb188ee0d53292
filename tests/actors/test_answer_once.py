"""The journal keeps an answer once: a repair step's row holds the answer it
repairs in `previous_answer` alone, its input refers to it (`input_answer_at`),
and the subagent is sent the whole input, naming the answer, on both backends and
from a run process killed after any row of the repair's path."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from trio.testing import MockClock

import tests.actors.test_app_server_run as app_server
from crw.engine import answer, step_input
from crw.host.sim.server import SimHost
from tests.actors.test_session_resume import CALL, last, remembering, run_until_killed
from tests.actors.test_session_run import harness, kinds

PAD = "z" * 20_000
BROKEN = {"summary": 5, "pad": PAD}
"""A first answer that breaks build's schema (summary is no string), 20 KB."""
FIRST = ["prepared", "step_published", "thread_started", "turn_started"]
REPAIRED = [*FIRST, "step_published", "turn_started", "completed"]


def journal_lines(path: Path) -> list[str]:
    return path.read_text().splitlines()


def repair_line(lines: list[str]) -> str:
    (line,) = [
        ln
        for ln in lines
        if (row := json.loads(ln))["row"] == "step_published"
        and row.get("call") == CALL
        and row.get("repair")
    ]
    return line


def sent(sim: SimHost, marker: str) -> list[str]:
    """The texts of every turn the host was sent with `marker`'s line."""
    texts = [
        item["content"][0]["text"]
        for thread in sim.state.threads.values()
        for turn in thread.turns
        for item in turn.items
        if item["type"] == "userMessage"
    ]
    return [text for text in texts if f"crw-flow-op: {marker}\n" in text]


def assert_answer_once(lines: list[str], sim: SimHost) -> None:
    """The repair row holds the answer once, and the turn sent names it whole."""
    line = repair_line(lines)
    assert line.count(PAD) == 1
    assert len(line) < len(PAD) + 5_000
    row: dict[str, Any] = json.loads(line)
    assert row["previous_answer"] == json.dumps(BROKEN)
    assert PAD not in row["input"] and isinstance(row["input_answer_at"], int)
    whole = step_input.full(row["input"], row["previous_answer"], row["input_answer_at"])
    assert answer.digest(whole) == row["input_digest"]  # the input journaled, whole again
    (text,) = sent(sim, f"{CALL}/t2-a1")
    assert f"```text\n{json.dumps(BROKEN)}\n```" in text
    assert text.startswith(whole.rstrip("\n"))  # an App Server turn names the tools after


async def test_session_repair_row_keeps_the_answer_once(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    async with harness(tmp_path) as h:
        await h.script({"marker": f"{CALL}/t1-*"}, answer=BROKEN)
        state, rows = await h.go()
        assert_answer_once(journal_lines(h.run.journal), h.sim)
    assert kinds(rows, CALL) == REPAIRED
    assert state == "ended" and rows[-1]["status"] == "completed"


async def test_app_server_repair_row_keeps_the_answer_once(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    async with app_server.harness(tmp_path) as h:
        await h.script({"marker": f"{CALL}/t1-*"}, answer=BROKEN)
        state, rows = await h.run()
        assert_answer_once(journal_lines(h.run_dir / "journal.jsonl"), h.sim)
    assert kinds(rows, CALL) == REPAIRED
    assert state == "ended" and rows[-1]["status"] == "completed"


@pytest.mark.parametrize(
    ("kind", "nth"),
    [("thread_started", 1), ("step_published", 2), ("turn_started", 2), ("completed", 1)],
)
async def test_session_run_killed_on_the_repair_path_ends_the_same(
    tmp_path: Path,
    autojump_clock: MockClock,
    monkeypatch: pytest.MonkeyPatch,
    kind: str,
    nth: int,
) -> None:
    async with harness(tmp_path) as h:
        remembering(h)
        await h.script({"marker": f"{CALL}/t1-*"}, answer=BROKEN)
        await run_until_killed(h, monkeypatch, kind, nth)
        state, rows = await h.go()
        assert_answer_once(journal_lines(h.run.journal), h.sim)
    assert kinds(rows, CALL) == REPAIRED
    assert last(rows, "completed")["k"] == 2
    assert state == "ended" and rows[-1]["status"] == "completed"
