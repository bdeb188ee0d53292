"""The App Server resume table: rows and the host's read of the thread in, the
resumed call's move out (pure)."""

from __future__ import annotations

from typing import Any

import pytest

from crw.engine.holds.app_resume import Generation, Resume, decide, generation, turn_text
from crw.engine.steps import packet
from crw.host.protocol import Thread
from tests.engine.test_packet import GO, RUN_JSON, WORKFLOW, app_args, app_journal, app_turn

STEP1 = {"row": "step_published", "call": "b.1", "k": 1, "marker": "b.1/t1-a1", "input": "x"}
STEP2 = {"row": "step_published", "call": "b.1", "k": 2, "marker": "b.1/t2-a1", "input": "y"}
PREPARED = {"row": "prepared", "call": "b.1"}
THREAD = {"row": "thread_started", "call": "b.1", "thread_id": "th"}
TURN1 = {"row": "turn_started", "call": "b.1", "k": 1, "turn_id": "u1"}
TURN2 = {"row": "turn_started", "call": "b.1", "k": 2, "turn_id": "u2"}


def thread(*markers: str) -> Thread:
    """A host read of the thread whose turns carry `markers`."""
    turns = [
        {
            "id": f"h{i}",
            "status": "completed",
            "items": [
                {
                    "type": "userMessage",
                    "id": "m",
                    "content": [{"type": "text", "text": f"crw-flow-op: {m}\nrest"}],
                }
            ],
        }
        for i, m in enumerate(markers)
    ]
    return Thread.model_validate({"id": "th", "status": {"type": "idle"}, "turns": turns})


def test_a_call_with_no_row_or_ended_by_a_terminal_row_is_not_open() -> None:
    assert generation([]) is None
    assert generation([PREPARED, STEP1, THREAD, TURN1, {"row": "held", "call": "b.1"}]) is None


def test_only_the_newest_generation_is_read() -> None:
    held = {"row": "held", "reason": "paused"}
    rows: list[dict[str, Any]] = [PREPARED, STEP1, THREAD, TURN1, held, PREPARED, STEP1]
    assert generation(rows) == Generation(step=STEP1, thread_id=None, turn_id=None)


@pytest.mark.parametrize(
    ("rows", "host", "move"),
    [
        pytest.param([PREPARED], None, Resume("publish"), id="prepared"),
        pytest.param([PREPARED, STEP1], None, Resume("start_thread"), id="step_published"),
        pytest.param(
            [PREPARED, STEP1, THREAD], thread(), Resume("start_turn"), id="thread_started"
        ),
        pytest.param(
            [PREPARED, STEP1, THREAD], thread("b.1/t1-a1"), Resume("adopt", "h0"),
            id="thread_started-turn-on-the-host",
        ),
        pytest.param(
            [PREPARED, STEP1, THREAD], None, Resume("start_thread"),
            id="thread_started-no-rollout",
        ),
        pytest.param(
            [PREPARED, STEP1, THREAD, TURN1], thread("b.1/t1-a1"), Resume("follow", "u1"),
            id="turn_started",
        ),
        pytest.param(
            [PREPARED, STEP1, THREAD, TURN1, STEP2], thread("b.1/t1-a1"), Resume("start_turn"),
            id="repair-published",
        ),
        pytest.param(
            [PREPARED, STEP1, THREAD, TURN1, STEP2], thread("b.1/t1-a1", "b.1/t2-a1"),
            Resume("adopt", "h1"), id="repair-on-the-host",
        ),
        pytest.param(
            [PREPARED, STEP1, THREAD, TURN1, STEP2, TURN2], thread("b.1/t1-a1", "b.1/t2-a1"),
            Resume("follow", "u2"), id="repair-turn_started",
        ),
    ],
)  # fmt: skip
def test_resume_table(rows: list[dict[str, Any]], host: Thread | None, move: Resume) -> None:
    """spec: STEP-59 (a call left open goes on on its thread: a turn the rows or the
    host bound is followed, a turn never started is started once)"""
    open_call = generation(rows)
    assert open_call is not None
    assert decide(open_call, host) == move


def test_turn_text_from_the_journaled_input_is_the_undisturbed_turn_text() -> None:
    """spec: STEP-57, STEP-61"""
    tools = packet.tools_section("/var/tmp/run", GO, RUN_JSON, WORKFLOW)
    assert turn_text(app_journal(**app_args()), tools) == app_turn(**app_args())
    repair = packet.repair_text(["$: no"], "{}", {"type": "object"})
    named = packet.repair_text(["$: no"], "{}", {"type": "object"}, tools)
    assert turn_text(repair, tools) == named
    bare = app_args(tmpdir=None, go_root=None)
    assert turn_text(app_journal(**bare), None) == app_turn(**bare)
