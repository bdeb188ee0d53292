"""A duplicate spawned for a step whose call has ended: which subagents the run
closes, and the several_spawns row it writes once (`crw.engine.steps.late_strays`)."""

from __future__ import annotations

from typing import Any

import pytest

from crw.engine.steps import late_strays, markers
from crw.engine.steps.late_strays import Step
from crw.engine.steps.replies import call_record
from tests.engine.test_bind import (
    AGENT,
    OTHER_AGENT,
    OWNER,
    RUN,
    host_turn,
    spawn_text,
    subagent,
    user_message,
)

STEP = Step("build.1", 1, 1)
PUBLISHED = {"row": "step_published", "call": "build.1", "k": 1, "attempt": 1, "action": "spawn"}
BOUND = [
    PUBLISHED,
    {"row": "thread_started", "call": "build.1", "thread_id": AGENT, "attempt": 1},
    {"row": "turn_started", "call": "build.1", "k": 1, "attempt": 1, "turn_id": "turn-1"},
]
WARNED = {
    "row": "session_host_warning",
    "call": "build.1",
    "op": "build.1/t1",
    "warnings": ["several_spawns"],
}


def rows(*more: dict[str, Any]) -> list[dict[str, Any]]:
    return [*BOUND, *more]


def test_a_marker_names_its_call_turn_and_attempt() -> None:
    assert markers.parse("review.1.r2/t2-a3") == ("review.1.r2", 2, 3)
    assert late_strays.step_of("build.1/t1-a1") == STEP and STEP.op == "build.1/t1"
    for text in (None, "", "build.1", "build.1/t1", "build.1/tx-a1", "/t1-a1", "build.1/t1-a"):
        assert markers.parse(text) is None


@pytest.mark.parametrize(
    ("end", "verdict"),
    [
        ([], "wait"),  # the call's binder closes its strays
        ([{"row": "completed"}], "read"),
        ([{"row": "null_model"}], "read"),
        ([{"row": "superseded"}], "read"),
        ([{"row": "held"}], "read"),  # its turn was bound: it never binds another
        ([{"row": "held"}, {"row": "decision", "choice": "retry"}], "wait"),
    ],
)
def test_a_subagent_of_an_ended_calls_bound_step_is_read(
    end: list[dict[str, Any]], verdict: str
) -> None:
    """spec: DISP-16, DISP-25"""
    record = call_record(rows(*({"call": "build.1"} | r for r in end)))
    assert late_strays.verdict(STEP, OTHER_AGENT, record) == verdict
    assert late_strays.verdict(STEP, AGENT, record) == "drop"  # the call's own


def test_a_step_no_subagent_took_has_no_duplicate() -> None:
    """spec: ATT-35: a held call looks its published, unbound step up by its marker
    when it goes on, so that subagent is asked about again, not closed; a step of
    an attempt that is over has duplicates."""
    held = call_record([PUBLISHED, {"row": "held", "call": "build.1"}])
    assert late_strays.verdict(STEP, OTHER_AGENT, held) == "wait"
    for end in ("completed", "superseded"):  # it never goes on: one spawn, not several
        unbound = call_record([PUBLISHED, {"row": end, "call": "build.1"}])
        assert late_strays.verdict(STEP, OTHER_AGENT, unbound) == "drop"
    over = {"row": "session_attempt_lost", "call": "build.1", "attempt": 1}
    lost = call_record(rows(over, PUBLISHED | {"attempt": 2}, {"row": "held", "call": "build.1"}))
    assert late_strays.verdict(STEP, OTHER_AGENT, lost) == "read"  # attempt 1 is over


def test_only_an_open_subagent_of_the_owner_carrying_the_runs_packet_is_a_duplicate() -> None:
    """spec: DISP-25, DISP-10: another run's step of the same marker is that run's."""
    assert late_strays.is_duplicate(RUN, OWNER, STEP, subagent(id=OTHER_AGENT))
    closed = subagent(id=OTHER_AGENT, status={"type": "notLoaded"})
    other_run = subagent(turns=[host_turn("t", user_message(spawn_text(run="run-2")))])
    other_step = subagent(turns=[host_turn("t", user_message(spawn_text(attempt=2)))])
    not_owners = subagent(parentThreadId=OTHER_AGENT)
    for thread in (closed, other_run, other_step, not_owners, subagent(turns=[])):
        assert not late_strays.is_duplicate(RUN, OWNER, STEP, thread)


def test_several_spawns_is_written_once_whatever_process_finds_the_duplicate() -> None:
    """spec: ROWS-14: the call's rows (a resumed process's journal) hold the row:
    none again; another warning of the op is not it."""
    ended = rows({"row": "completed", "call": "build.1"})
    row = late_strays.warning(STEP, call_record(ended))
    assert row is not None and row.model_dump(exclude_none=True) == WARNED | {"row": row.row}
    assert late_strays.warning(STEP, call_record([*ended, WARNED])) is None
    other = WARNED | {"warnings": ["no_ledger_line"]}
    assert late_strays.warning(STEP, call_record([*ended, other])) is not None
