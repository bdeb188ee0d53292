"""Review rounds and continuations on the session backend, end to end on the
simulated host with a scripted owner under one MockClock (spec: ATT-37..49,
STEP-25, STEP-54, DISP-21..23, ROWS-4). Each test asserts the rows written."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import pytest
from trio.testing import MockClock

import tests.actors.test_session_run as session_run
from crw.actors.journal_writer import open_journal_writer
from crw.engine import answer
from crw.engine.roles import RolePair
from crw.journal.log import read_journal
from crw.journal.rows import Started
from tests.actors.test_session_resume import KillPoint
from tests.actors.test_session_run import Harness, harness, kinds

Rows = list[dict[str, Any]]

REVIEWED = """
name = "reviewed"
pool = 2

[[node]]
id = "build"
role = "executor"
task = "Fix the parser."
schema = { type = "object", required = ["summary"], properties = { summary = { type = "string" } } }
review = { role = "reviewer", rounds = ROUNDS }

[[node]]
id = "ship"
role = "explorer"
needs = ["build"]
task = "Ship {build.summary}."
schema = { type = "object", required = ["done"], properties = { done = { type = "boolean" } } }
"""
REJECT = {"verdict": "reject", "findings": ["the summary names no file"]}
FIXED = {"summary": "fixed parser.py"}


async def reviewed(tmp_path: Path, h: Harness, rounds: int = 1) -> None:
    (tmp_path / "wf.toml").write_text(REVIEWED.replace("ROUNDS", str(rounds)))
    await h.script({"marker": "build.2/*"}, answer=REJECT, seconds=1)
    await h.script({"marker": "build.3/*"}, answer=FIXED, seconds=1)


def of(rows: Rows, call: str, kind: str) -> list[dict[str, Any]]:
    return [r for r in rows if r.get("call") == call and r["row"] == kind]


def one(rows: Rows, call: str, kind: str) -> dict[str, Any]:
    found = of(rows, call, kind)
    assert len(found) == 1, (call, kind, found)
    return found[0]


async def test_a_rejection_runs_a_fix_that_continues_the_node_on_a_new_subagent(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: ATT-37, ATT-38, ROWS-4, STEP-25, ATT-40, ATT-41, ATT-45, STEP-54, ATT-42"""
    async with harness(tmp_path) as h:
        await reviewed(tmp_path, h)
        state, rows = await h.go()
        packet = Path(one(rows, "build.3", "step_published")["packet"]).read_text()
    assert state == "ended" and rows[-1]["status"] == "completed"
    body = ["prepared", "step_published", "thread_started", "turn_started", "completed"]
    for call in ("build.1", "build.2", "build.3", "build.4"):
        assert kinds(rows, call) == body
    calls = [r["call"] for r in rows if r["row"] == "prepared"]
    assert calls[:4] == ["build.1", "build.2", "build.3", "build.4"]
    assert one(rows, "build.2", "prepared")["role"] == "reviewer"
    assert one(rows, "build.2", "completed")["result"] == REJECT
    # The fix: a continuation of build.1, in build.1's workspace, a spawn step
    # on a new subagent with its own thread_started row.
    fix = one(rows, "build.3", "prepared")
    first = one(rows, "build.1", "prepared")
    assert fix["resume"] == "build.1" and fix["role"] == "executor"
    assert fix["allocation"]["workspace"] == first["allocation"]["workspace"]
    step = one(rows, "build.3", "step_published")
    assert (step["k"], step["attempt"], step["action"], step["conversation_turn"]) == (
        1,
        1,
        "spawn",
        1,
    )
    threads = {c: one(rows, c, "thread_started")["thread_id"] for c in ("build.1", "build.3")}
    assert threads["build.1"] != threads["build.3"]
    # The packet: build.1's turn with the input it took, its packet, its answer
    # file, and the findings.
    handle_step = one(rows, "build.1", "step_published")
    assert "## The conversation you go on from" in packet
    assert "### build.1 turn 1 (t1-a1)" in packet
    assert handle_step["input"] in packet
    assert f"The packet of the call you continue: {handle_step['packet']}." in packet
    answer_file = Path(packet.split("Its answer: ", 1)[1].split(".json", 1)[0] + ".json")
    assert json.loads(answer_file.read_text()) == one(rows, "build.1", "completed")["result"]
    assert "- the summary names no file" in packet
    # The node's result is the accepted answer: the fix's.
    assert one(rows, "build.4", "completed")["result"]["verdict"] == "accept"
    assert rows[-1]["state"]["build"] == "completed"
    ship = one(rows, "ship.1", "step_published")
    assert "fixed parser.py" in Path(ship["packet"]).read_text()
