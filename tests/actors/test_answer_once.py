"""The journal keeps an answer once: a repair step's row holds the answer it
repairs in `previous_answer` alone, its input refers to it (`input_answer_at`),
and the subagent is sent the whole input, naming the answer, on both backends and
from a run process killed after any row of the repair's path; a later step that
repairs the same answer names that row (`previous_answer_in`), and a result taken
out of prose is kept once, in the message as it was (`raw_text`, `result_span`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import trio
from trio.testing import MockClock

import tests.actors.test_app_server_run as app_server
from crw.engine.answers import answer
from crw.engine.steps import packet, step_input
from crw.host.sim.server import SimHost
from crw.journal.rows import StepPublished
from tests.actors.test_session_lost import lost_owner, steps
from tests.actors.test_session_resume import CALL, last, remembering, run_until_killed
from tests.actors.test_session_run import harness, kinds
from tests.actors.test_shadow_lost import _shadow as shadow_of

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


# The journal file holds each answer's text once, whatever the call's path: each
# answer carries a marker no other text has, counted in journal.jsonl's bytes.

FIRST_MARK = "first-answer-" + "f" * 20_000
LAST_MARK = "last-answer-" + "l" * 20_000
BROKEN_MARKED = {"summary": 5, "pad": FIRST_MARK}
"""A first answer that breaks build's schema, with its marker."""
FIXED_MARKED = {"summary": "done", "pad": LAST_MARK}
"""An answer that passes, with its marker where no later call's task names it."""
PROSE = "Done, the answer follows."
"""Prose before the object: the result is taken out of the message (HARV-5)."""


def times_in_journal(path: Path, mark: str) -> int:
    return path.read_bytes().count(mark.encode())


def assert_prose_reads_back(rows: list[dict[str, Any]]) -> None:
    """The completed row keeps the message as it was and, in place of a copy of
    the result, where it stands in it (`result_span`); the result reads back from
    there, canonical (`crw.journal.result_span`)."""
    completed = last(rows, "completed")
    assert completed["extracted"] is True
    assert completed["raw_text"] == f"{PROSE}\n\n" + json.dumps(FIXED_MARKED)
    start, end = completed["result_span"]
    assert json.loads(completed["raw_text"][start:end]) == FIXED_MARKED
    assert completed["result"] == FIXED_MARKED
    assert list(completed["result"]) == sorted(FIXED_MARKED)


async def test_session_answer_in_prose_is_in_the_journal_once(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: HARV-5, HARV-7: the result taken out of prose, kept once."""
    async with harness(tmp_path) as h:
        await h.script({"marker": f"{CALL}/t1-*"}, answer=FIXED_MARKED, prose=PROSE)
        state, rows = await h.go()
        assert times_in_journal(h.run.journal, LAST_MARK) == 1
    assert kinds(rows, CALL) == [*FIRST, "completed"]
    assert_prose_reads_back(rows)
    assert state == "ended" and rows[-1]["status"] == "completed"


async def test_app_server_answer_in_prose_is_in_the_journal_once(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: HARV-5, HARV-7"""
    async with app_server.harness(tmp_path) as h:
        await h.script({"marker": f"{CALL}/t1-*"}, answer=FIXED_MARKED, prose=PROSE)
        state, rows = await h.run()
        assert times_in_journal(h.run_dir / "journal.jsonl", LAST_MARK) == 1
    assert kinds(rows, CALL) == [*FIRST, "completed"]
    assert_prose_reads_back(rows)
    assert state == "ended" and rows[-1]["status"] == "completed"


async def test_session_repaired_answers_are_in_the_journal_once_each(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: HARV-7, STEP-15: the broken answer in the repair's row alone, the
    repaired one in the completed row alone."""
    async with harness(tmp_path) as h:
        await h.script({"marker": f"{CALL}/t1-*"}, answer=BROKEN_MARKED)
        await h.script({"marker": f"{CALL}/t2-*"}, answer=FIXED_MARKED, prose=PROSE)
        state, rows = await h.go()
        assert times_in_journal(h.run.journal, FIRST_MARK) == 1
        assert times_in_journal(h.run.journal, LAST_MARK) == 1
    assert kinds(rows, CALL) == REPAIRED
    assert_prose_reads_back(rows)
    assert state == "ended" and rows[-1]["status"] == "completed"


async def test_session_lost_repair_then_respawn_keeps_the_answer_once(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: STEP-24, ATT-10: the attempt after a lost repair carries the repair; its
    row names the repair's row, which holds the answer, and its packet names the
    answer whole, as when the row held a copy; the shadow replay agrees."""
    async with harness(tmp_path) as h:
        lost_owner(h)
        await h.script({"marker": f"{CALL}/t1-a1"}, answer=BROKEN_MARKED)
        await h.script({"marker": f"{CALL}/t2-a1"}, vanish="systemError")
        await h.script({"marker": f"{CALL}/t2-a2"}, answer=FIXED_MARKED, prose=PROSE)
        state, rows = await h.go()
        assert times_in_journal(h.run.journal, FIRST_MARK) == 1
        assert times_in_journal(h.run.journal, LAST_MARK) == 1
        _, repair, again = steps(rows)
        text = await trio.Path(again["packet"]).read_text()
    assert "session_attempt_lost" in kinds(rows, CALL)
    assert again["previous_answer_in"] == repair["marker"] and "previous_answer" not in again
    whole = packet.fenced_answer(json.dumps(BROKEN_MARKED))
    assert text.count(whole) == 1 and answer.digest(text) == again["packet_digest"]
    # The packet a row with the copy makes (a crw before) is the same text.
    copied = StepPublished.model_validate(again | {"previous_answer": repair["previous_answer"]})
    assert step_input.answer_of(copied) == step_input.answer_of(again, rows)
    assert_prose_reads_back(rows)
    assert state == "ended" and rows[-1]["status"] == "completed"
    report = shadow_of(tmp_path, rows, 3)
    assert report.points == [] and report.checked["repair"] == 2 and report.checked["lost"] == 1


KEPT_MARK = "kept-once-" + "k" * 5_000
IRREGULAR = (
    "Found them:\n```json\n"
    f'{{ "files" :[ "b.py","a.py" ],\n  "note":{{"z":1 , "a":[2,{{"y":"{KEPT_MARK}", "b":4}}]}} }}'
    "\n```\n"
)
"""A message whose object has its own spaces and key order, after prose."""
CANONICAL = {"files": ["b.py", "a.py"], "note": {"a": [2, {"b": 4, "y": KEPT_MARK}], "z": 1}}
"""Its result as the row reads it: its keys sorted at every level (HARV-6)."""


async def test_session_answer_in_prose_is_kept_byte_for_byte_and_read_as_before(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: HARV-5, HARV-6, HARV-7: the completed row keeps the message as it was,
    byte for byte, once; its result (canonical, keys sorted at every level) reads
    back from where it stands in it, for the replay, the next call's task and the
    shadow replay."""
    async with harness(tmp_path) as h:
        await h.script({"marker": "explore.1/t1-*"}, text=IRREGULAR)
        state, rows = await h.go()
        assert times_in_journal(h.run.journal, KEPT_MARK) == 1
        (line,) = [
            ln
            for ln in journal_lines(h.run.journal)
            if (row := json.loads(ln))["row"] == "completed" and row["call"] == "explore.1"
        ]
    stored = json.loads(line)
    assert stored["raw_text"] == IRREGULAR and "result" not in stored
    start, end = stored["result_span"]
    assert IRREGULAR[start:end] == IRREGULAR[IRREGULAR.index("{") : IRREGULAR.rindex("}") + 1]
    assert stored["result_digest"] == answer.digest(CANONICAL) and stored["extracted"] is True
    completed = next(r for r in rows if r["row"] == "completed" and r["call"] == "explore.1")
    assert completed["result"] == CANONICAL
    assert json.dumps(completed["result"]) == json.dumps(CANONICAL)  # keys sorted, as before
    build = next(r for r in rows if r["row"] == "step_published" and r["call"] == "build.1")
    task = await trio.Path(build["packet"]).read_text()  # the gate's input: the result
    assert 'Fix it, starting from ["b.py", "a.py"].' in task
    assert state == "ended" and rows[-1]["status"] == "completed"
    report = shadow_of(tmp_path, rows, 3)
    assert report.points == [] and report.checked["harvest"] == 3
