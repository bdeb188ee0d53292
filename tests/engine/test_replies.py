"""The reply to a report about any step but the one its call waits on, from the rows."""

from __future__ import annotations

from typing import Any

from crw.engine.steps.replies import (
    ALREADY_ANSWERED,
    CallRecord,
    CallRecords,
    call_record,
    decide_late,
    reads_host,
)
from tests.engine.test_bind import OTHER_AGENT, RUN, host_turn, spawn_text, subagent, user_message

A = "agent-a"
B = "agent-b"


def step(k: int, attempt: int = 1, **fields: Any) -> dict[str, Any]:
    return {"row": "step_published", "call": "build.1", "k": k, "attempt": attempt} | fields


def thread(agent: str, attempt: int = 1) -> dict[str, Any]:
    return {"row": "thread_started", "call": "build.1", "thread_id": agent, "attempt": attempt}


def turn(k: int, attempt: int = 1) -> dict[str, Any]:
    return {"row": "turn_started", "call": "build.1", "k": k, "attempt": attempt}


PREPARED = {"row": "prepared", "call": "build.1"}
REPAIR_WAITS = [
    PREPARED,
    step(1, action="spawn"),
    thread(A),
    turn(1),
    step(2, action="send_input", agent_id=A),
]


def test_record_reads_each_bound_turn_and_its_subagent() -> None:
    record = call_record([*REPAIR_WAITS, turn(2)])
    assert record == CallRecord(
        ended=None,
        attempt=1,
        lost=frozenset(),
        published=frozenset({(1, 1), (1, 2)}),
        turns={(1, 1): A, (1, 2): A},
        agents=frozenset({A}),
    )


def test_repair_step_published_and_not_bound_is_the_step_the_call_waits_on() -> None:
    """spec: ATT-18 (the report waits for its call's actor)"""
    record = call_record(REPAIR_WAITS)
    assert record.waits_on(1, 2)
    assert not record.waits_on(1, 1) and not record.waits_on(1, 3) and not record.waits_on(2, 1)


def test_late_report_for_turn_1_while_the_repair_waits_is_answered_bound() -> None:
    """spec: DISP-6: the subagent the repair needs is never told to close."""
    reply = decide_late(1, 1, A, call_record(REPAIR_WAITS))
    assert (reply.kind, reply.reason) == ("bound", "already bound")


def test_report_repeating_a_bind_without_a_subagent_is_answered_bound() -> None:
    """spec: DISP-6, BIND-7 (a send_input report names no subagent)"""
    reply = decide_late(2, 1, None, call_record([*REPAIR_WAITS, turn(2)]))
    assert (reply.kind, reply.reason) == ("bound", "already bound")


def test_report_naming_another_subagent_for_a_bound_turn_is_answered_close() -> None:
    """spec: DISP-16"""
    reply = decide_late(1, 1, B, call_record(REPAIR_WAITS))
    assert (reply.kind, reply.reason) == ("close", "a second subagent for a bound attempt")


def test_turn_1_of_a_repair_spawned_on_a_new_subagent_is_its_first_subagents() -> None:
    """spec: DISP-6, DISP-16 (each turn names the subagent it ran on)"""
    rows = [*REPAIR_WAITS[:4], step(2, action="spawn"), thread(B), turn(2)]
    record = call_record(rows)
    assert decide_late(1, 1, A, record).kind == "bound"
    assert decide_late(1, 1, B, record).kind == "close"
    assert decide_late(2, 1, B, record).kind == "bound"


def test_report_for_an_attempt_that_ended_answered_is_answered_close() -> None:
    """spec: DISP-13, CMD-DISP-6: the subagent the call bound and was answered by is
    told so plainly (a close, no fault); any other of the ended call as before."""
    for end in ("completed", "null_model"):
        record = call_record([*REPAIR_WAITS, turn(2), {"row": end, "call": "build.1"}])
        reply = decide_late(2, 1, A, record)
        assert (reply.kind, reply.reason) == ("close", ALREADY_ANSWERED)
        assert ALREADY_ANSWERED == "already bound by its marker and answered; close it"
        other = decide_late(2, 1, B, record)
        assert (other.kind, other.reason) == ("close", "an attempt that ended (answered)")


def test_a_lost_attempts_subagent_of_an_answered_call_is_not_told_it_answered() -> None:
    """spec: DISP-13, DISP-14: only the answering attempt's subagent reads
    ALREADY_ANSWERED; the lost attempt's is closed as an attempt that ended."""
    lost = {"row": "session_attempt_lost", "call": "build.1", "attempt": 1}
    rows = [PREPARED, step(1, action="spawn"), thread(A), turn(1), lost]
    rows += [step(1, 2, action="spawn"), thread(B, 2), turn(1, 2)]
    record = call_record([*rows, {"row": "completed", "call": "build.1"}])
    assert decide_late(1, 1, A, record).reason == "an attempt that ended (answered)"
    assert decide_late(1, 2, B, record).reason == ALREADY_ANSWERED


def test_report_for_a_held_call_is_answered_close() -> None:
    """spec: DISP-13"""
    record = call_record([*REPAIR_WAITS, {"row": "held", "call": "build.1"}])
    assert decide_late(1, 1, A, record).reason == "an attempt that ended (held)"


def test_report_for_an_attempt_that_was_lost_is_answered_close() -> None:
    """spec: DISP-14"""
    lost = {"row": "session_attempt_lost", "call": "build.1", "attempt": 1}
    record = call_record([*REPAIR_WAITS[:4], lost])
    reply = decide_late(1, 1, A, record)
    assert (reply.kind, reply.reason) == ("close", "an attempt that ended (lost)")
    later = call_record([*REPAIR_WAITS[:4], lost, step(1, attempt=2, action="spawn")])
    assert decide_late(1, 1, A, later).reason == "an attempt that ended (lost)"
    assert later.waits_on(2, 1)


def test_report_for_a_step_never_published_is_refused_or_closed() -> None:
    """spec: DISP-11, DISP-15"""
    record = call_record(REPAIR_WAITS)
    assert decide_late(3, 1, None, record).kind == "refused"
    assert decide_late(3, 1, A, record).reason == (
        "a step the run did not publish (an early report)"
    )
    assert decide_late(1, 2, A, record).kind == "close"
    assert decide_late(1, 1, A, CallRecord()).kind == "close"


def _as_call(rows: list[dict[str, Any]], call: str) -> list[dict[str, Any]]:
    return [row | {"call": call} for row in rows]


def test_call_records_kept_as_rows_commit_fold_each_row_once() -> None:
    """The inbox's answers to reports no call waits for read the records the run
    keeps as it commits: every row is folded once however many reports come, and
    each call's record is the one its rows fold to."""
    calls = [f"n{i}.1" for i in range(300)]
    start = [row for call in calls for row in _as_call(REPAIR_WAITS[:3], call)]
    records = CallRecords(start)
    later = [_as_call([turn(1), REPAIR_WAITS[4]], call) for call in calls]
    for batch in later:  # commits, one call's batch at a time
        records.add(batch)
    for _ in range(3):  # a report of every call, three times over
        for call, batch in zip(calls, later, strict=True):
            mine = [*_as_call(REPAIR_WAITS[:3], call), *batch]
            assert records.record(call) == call_record(mine)
            assert decide_late(1, 1, B, records.record(call)).kind == "close"
    assert records.folded == len(start) + sum(len(batch) for batch in later)
    assert records.record("never.1") == CallRecord()


ENDED = [*REPAIR_WAITS, turn(2), {"row": "completed", "call": "build.1"}]


def other_runs(run: str = "run-x") -> Any:
    """The host's snapshot of a subagent whose first message is `run`'s step's."""
    first = host_turn("turn-1", user_message(spawn_text(run=run)))
    return subagent([first], id=OTHER_AGENT)


def test_late_report_of_another_runs_subagent_is_refused_naming_that_run() -> None:
    """spec: DISP-10: a report of another run's subagent for a step that ended is
    refused, not answered close: an owner that obeyed would close that run's
    subagent."""
    record = call_record(ENDED)
    assert reads_host(OTHER_AGENT, record)
    reply = decide_late(1, 1, OTHER_AGENT, record, run=RUN, thread=other_runs())
    assert (reply.kind, reply.reason) == ("refused", "the subagent carries run run-x's step")
    early = decide_late(3, 1, OTHER_AGENT, call_record(REPAIR_WAITS), run=RUN, thread=other_runs())
    assert early.kind == "refused"


def test_late_report_of_this_runs_own_subagent_is_answered_close_without_the_host() -> None:
    """spec: DISP-13: the subagent of this run's ended attempt is told to close from
    the rows (no host read), and so is an unbound subagent of this run's step."""
    record = call_record(ENDED)
    assert not reads_host(A, record)
    assert not reads_host(None, record)
    assert decide_late(2, 1, A, record).reason == ALREADY_ANSWERED
    mine = subagent([host_turn("turn-1", user_message(spawn_text()))], id=OTHER_AGENT)
    reply = decide_late(1, 1, OTHER_AGENT, record, run=RUN, thread=mine)
    assert (reply.kind, reply.reason) == ("close", "an attempt that ended (answered)")
    assert decide_late(1, 1, OTHER_AGENT, record, run=RUN).kind == "close"  # no such thread


def test_late_report_of_an_unbound_subagent_on_an_unreadable_host_is_answered_retry() -> None:
    """spec: DISP-9: whose subagent it is cannot be told without the host."""
    reply = decide_late(1, 1, OTHER_AGENT, call_record(ENDED), run=RUN, host_error="timed out")
    assert (reply.kind, reply.reason) == ("retry", "the host cannot be read yet: timed out")
