"""The decisions about a held call, pure: the answer judged against the rows, and
how a call answered retry goes on (spec: ATT-32..35, STEP-53)."""

from __future__ import annotations

from typing import Any

from crw.engine.holds.decision import Already, Record, Refused, decide_answer, in_place
from crw.journal.replay import replay

CALL = "build.1"
Rows = list[dict[str, Any]]


def row(kind: str, **fields: Any) -> dict[str, Any]:
    return {"row": kind, "call": CALL, **fields}


def step(k: int, attempt: int, **fields: Any) -> dict[str, Any]:
    marker = f"{CALL}/t{k}-a{attempt}"
    return row("step_published", k=k, attempt=attempt, op=f"{CALL}/t{k}", marker=marker, **fields)


def turn(k: int, attempt: int) -> dict[str, Any]:
    return row("turn_started", k=k, attempt=attempt, turn_id=f"turn-{k}-{attempt}")


HELD: Rows = [
    {"row": "started", "backend": "session"},
    row("prepared", node="build", role="executor"),
    step(1, 1, action="spawn", conversation_turn=1),
    row("thread_started", thread_id="thr-1", attempt=1),
    turn(1, 1),
    row("held", reason="host_failure", error="boom"),
]


def answer(rows: Rows, choice: Any, call: str = CALL) -> Any:
    mine = [r for r in rows if r.get("call") == call]
    return decide_answer(replay(rows), mine, "r1", call, choice)


def test_an_answer_to_a_held_call_is_a_decision_row_naming_the_held_reason() -> None:
    verdict = answer(HELD, "retry")
    assert isinstance(verdict, Record)
    assert verdict.row.model_dump(exclude_none=True) == {
        "row": "decision",
        "call": CALL,
        "choice": "retry",
        "reason": "host_failure",
    }


def test_the_same_answer_again_is_already_and_another_is_refused() -> None:
    answered = [*HELD, row("decision", choice="retry")]
    assert answer(answered, "retry") == Already("retry")
    refused = answer(answered, "skip")
    assert isinstance(refused, Refused)
    assert refused.line == (
        "call build.1 of run r1 was answered retry already, and a held call takes one "
        "answer: the run goes on with retry; see it with crw flow status r1 (go on with "
        "crw flow resume r1 --detach if no process runs it)"
    )


def test_a_call_held_again_after_a_retry_takes_a_new_answer() -> None:
    again = [*HELD, row("decision", choice="retry"), step(2, 2), turn(2, 2), row("held")]
    assert isinstance(answer(again, "skip"), Record)


def test_unknown_calls_calls_not_held_and_runs_not_waiting_are_refused() -> None:
    unknown = answer(HELD, "retry", call="nope.1")
    assert isinstance(unknown, Refused) and unknown.line.startswith("run r1 has no call nope.1")
    running = answer(HELD[:-1], "retry")
    assert isinstance(running, Refused) and "is running, not held" in running.line
    paused = answer([*HELD, {"row": "paused", "reason": "usage_limit_exceeded"}], "retry")
    assert isinstance(paused, Refused)
    assert "is paused, not waiting_decision; go on with crw flow resume r1" in paused.line


def test_a_held_call_of_an_ended_run_is_refused_with_the_start_that_runs_it_again() -> None:
    """Nothing runs a call of an ended run: every answer, --restart too, is refused in
    one line that names the command starting the workflow again; an abort said again
    is still `Already` (it finishes an end a crash cut short)."""
    ended = [*HELD, {"row": "cancelled"}, {"row": "ended", "status": "cancelled"}]
    mine = [r for r in ended if r.get("call") == CALL]
    again = "crw flow start w.toml --backend session --host unix:/h.sock --owner o"
    for choice in ("retry", "skip", "abort", "restart"):
        verdict = decide_answer(replay(ended), mine, "r1", CALL, choice, again=again)
        assert verdict == Refused(
            "run r1 has ended (cancelled): its call build.1 takes no answer, nothing would "
            f"run it; to run it again, start a new run: {again}"
        )
    aborted = [*HELD, row("decision", choice="abort"), {"row": "ended", "status": "aborted"}]
    assert answer(aborted, "abort") == Already("abort")


def test_a_delivered_turn_goes_on_as_a_new_attempt_at_the_next_k() -> None:
    """spec: ATT-32, STEP-53"""
    plan = in_place([*HELD, row("decision", choice="retry")], "executor", "/w/p")
    assert (plan.look_up, plan.k, plan.attempt, plan.conversation_turn, plan.repair) == (
        False,
        2,
        2,
        1,
        False,
    )
    assert plan.replaces_turn == f"{CALL}/t1-a1"
    assert plan.note is not None
    assert plan.note.splitlines() == [
        "Attempt 1 of this call stopped: the call was held (host_failure: boom) and was "
        "answered retry; this is attempt 2, on a new subagent.",
        "The call's earlier attempts:",
        f"- attempt 1: {CALL}/t1-a1: held (host_failure: boom)",
        "Read `git -C /w/p status` and the diff first: the earlier attempts may have left "
        "changes there.",
    ]


def test_a_held_repair_goes_on_with_that_repair() -> None:
    """spec: ATT-33, ATT-34, STEP-15"""
    rows = [
        *HELD[:5],
        row("session_attempt_lost", attempt=1, reason="vanished"),
        step(1, 2, action="spawn"),
        turn(1, 2),
        step(2, 2, action="send_input", repair=True, conversation_turn=2,
             previous_answer='{"x": 1}', repair_errors=["'summary' is a required property"]),
        turn(2, 2),
        row("held", reason="host_failure"),
    ]  # fmt: skip
    plan = in_place(rows, "reviewer", "/w/p")
    assert (plan.k, plan.attempt, plan.conversation_turn, plan.repair) == (3, 3, 2, True)
    assert (plan.previous_answer, plan.repair_errors) == (
        '{"x": 1}',
        ["'summary' is a required property"],
    )
    assert plan.replaces_turn == f"{CALL}/t2-a2"
    assert plan.note is not None and "git -C" not in plan.note  # a reviewer writes nothing
    assert plan.note.splitlines()[2:] == [
        f"- attempt 1: {CALL}/t1-a1: lost (vanished)",
        f"- attempt 2: {CALL}/t1-a2, {CALL}/t2-a2: held (host_failure)",
    ]


def test_a_step_published_and_never_bound_is_looked_up() -> None:
    """spec: ATT-35"""
    rows = [*HELD[:2], step(1, 1, action="spawn"), row("held", reason="paused")]
    assert in_place(rows, "executor", "/w/p").look_up


def test_a_restart_names_the_nodes_next_free_call_after_its_review_rounds() -> None:
    """spec: ATT-36: a reviewed node's fix build.3 is held: the node runs again at
    build.4, past the review and fix rounds' ordinals; another node's calls and
    the call's own ordinal do not count."""
    rows: Rows = [
        {"row": "started", "backend": "session"},
        *({"row": "prepared", "call": f"build.{n}", "node": "build"} for n in (1, 2, 3)),
        {"row": "prepared", "call": "ship.7", "node": "ship"},
        {"row": "held", "call": "build.3", "reason": "host_failure"},
    ]
    verdict = answer(rows, "restart", "build.3")
    assert isinstance(verdict, Record)
    assert verdict.row.model_dump(exclude_none=True) == {
        "row": "decision",
        "call": "build.3",
        "choice": "restart",
        "reason": "host_failure",
        "by": "build.4",
    }


def test_a_restart_of_a_completed_call_is_refused() -> None:
    """spec: ATT-36: only a held call, or an open one, restarts."""
    rows = [*HELD[:-1], row("completed", result={})]
    verdict = answer(rows, "restart")
    assert isinstance(verdict, Refused)
    assert "is completed; only a held call, or an open one, restarts" in verdict.line
