"""An answer over the run's answer_max_bytes ends its call null_model
(answer_too_large), its size and the cap recorded, not its text, and no repair
turn asked; one under it completes as before. Both backends on the simulated
host, and a session run killed after each row of that path ends the same."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from trio.testing import MockClock

import tests.actors.test_app_server_run as app_server
from crw.settings import Settings
from tests.actors.test_session_resume import CALL, last, remembering, run_until_killed
from tests.actors.test_session_run import harness, kinds

CAP = 1024
BIG = {"summary": "x" * 2048}
"""An answer of 2 KiB and more, over CAP."""
SMALL = {"summary": "y" * 900}
"""An answer under CAP."""
ENDED_AT_ONCE = ["prepared", "step_published", "thread_started", "turn_started", "null_model"]


def too_large(rows: list[dict[str, Any]], call: str) -> dict[str, Any]:
    """The call's end: null_model answer_too_large with the size and the cap."""
    end = last(rows, "null_model", call)
    size = len(json.dumps(BIG).encode())
    assert end["reason"] == "answer_too_large"
    assert end["answer_bytes"] == size and end["answer_max_bytes"] == CAP
    assert end["errors"] == [f"$: the answer is {size:,} bytes, over answer_max_bytes ({CAP:,})"]
    assert "x" * 100 not in json.dumps(rows)  # the text is nowhere in the journal
    return end


def capped(settings: Settings) -> Settings:
    return replace(settings, answer_max_bytes=CAP)


async def test_session_answer_over_the_cap_ends_null_model_with_no_repair(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    async with harness(tmp_path) as h:
        h.settings = capped(h.settings)
        await h.script({"marker": f"{CALL}/*"}, answer=BIG)
        state, rows = await h.go()
    assert kinds(rows, CALL) == ENDED_AT_ONCE
    too_large(rows, CALL)
    assert "review.1" not in {r.get("call") for r in rows}
    assert state == "ended" and rows[-1]["status"] == "failed"


async def test_session_repair_answer_over_the_cap_ends_null_model(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """The first answer breaks the schema, small; the repair's is over the cap."""
    async with harness(tmp_path) as h:
        h.settings = capped(h.settings)
        await h.script({"marker": f"{CALL}/t1-*"}, invalidFirst=True)
        await h.script({"marker": f"{CALL}/t2-*"}, answer=BIG)
        _, rows = await h.go()
    assert kinds(rows, CALL)[-3:] == ["step_published", "turn_started", "null_model"]
    too_large(rows, CALL)


async def test_session_answer_under_the_cap_completes(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    async with harness(tmp_path) as h:
        h.settings = capped(h.settings)
        await h.script({"marker": f"{CALL}/*"}, answer=SMALL)
        state, rows = await h.go()
    assert last(rows, "completed")["result"] == SMALL
    assert state == "ended" and rows[-1]["status"] == "completed"


async def test_app_server_answer_over_the_cap_ends_null_model_with_no_repair(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    async with app_server.harness(tmp_path) as h:
        h.settings = capped(h.settings)
        await h.script({"marker": f"{CALL}/*"}, answer=BIG)
        await h.script({"marker": "explore.1/*"}, answer={"files": ["a"]})
        state, rows = await h.run()
    assert kinds(rows, CALL) == ENDED_AT_ONCE
    too_large(rows, CALL)
    assert state == "ended" and rows[-1]["status"] == "failed"


async def test_app_server_answer_under_the_cap_completes(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    async with app_server.harness(tmp_path) as h:
        h.settings = capped(h.settings)
        await h.script({"marker": f"{CALL}/*"}, answer=SMALL)
        state, rows = await h.run()
    assert app_server.terminal(rows, CALL)["result"] == SMALL
    assert state == "ended" and rows[-1]["status"] == "completed"


@pytest.mark.parametrize("kind", ["prepared", "step_published", "thread_started", "null_model"])
async def test_session_run_killed_after_any_row_of_the_path_ends_the_same(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    async with harness(tmp_path) as h:
        h.settings = capped(h.settings)
        remembering(h)
        await h.script({"marker": f"{CALL}/*"}, answer=BIG)
        await run_until_killed(h, monkeypatch, kind)
        state, rows = await h.go()
    assert kinds(rows, CALL) == ENDED_AT_ONCE
    too_large(rows, CALL)
    assert state == "ended" and rows[-1]["status"] == "failed"
