"""The one-call view from the rows each path of a call writes: completed at the
first turn, repaired, held then retried, null_model, lost, a review round, an
executor on git with its crw.commit. Pure: rows in, the view's fields checked."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from crw.engine.steps import step_input
from crw.engine.steps.packet import repair_text
from crw.engine.views.call_detail import (
    NOTE_ROWS,
    CallDetail,
    ChangedFile,
    SchemaView,
    call_detail,
)
from crw.journal.replay import replay
from crw.journal.rows import ROW_KINDS, StepPublished, dump_row

SCHEMA = {"type": "object", "required": ["ok"], "properties": {"ok": {"type": "boolean"}}}
P = "/s/flow/r/calls/a.1"
PACKET = "/s/flow/r/steps/a.1/packet-t1-a1.md"


def _at(second: int) -> str:
    return f"2026-12-06T10:00:{second:02d}.000000Z"


def rows_of(*rows: dict[str, Any], call: str = "a.1") -> list[dict[str, Any]]:
    """`rows` numbered from seq 1, a second apart, each of `call` unless it names one."""
    return [
        {"seq": seq, "at": _at(seq), "call": call} | row for seq, row in enumerate(rows, start=1)
    ]


def prepared(**more: Any) -> dict[str, Any]:
    allocation = {"workspace": P, "kind": "directory"}
    return {"row": "prepared", "node": "a", "role": "explorer", "backend": "session"} | (
        {"allocation": allocation} | more
    )


def spawn(k: int = 1, attempt: int = 1, **more: Any) -> dict[str, Any]:
    marker = f"a.1/t{k}-a{attempt}"
    return {
        "row": "step_published",
        "k": k,
        "op": f"a.1/t{k}",
        "marker": marker,
        "attempt": attempt,
        "action": "spawn",
        "input": f"crw-flow-op: {marker}\nRead the task packet {PACKET}",
        "packet": PACKET,
        "packet_digest": "sha256:00",
        "role": "explorer",
        "conversation_turn": 1,
    } | more


def bound(k: int = 1, attempt: int = 1, thread: str = "th-1", turn: str = "tu-1") -> list[Any]:
    marker = f"a.1/t{k}-a{attempt}"
    return [
        {"row": "thread_started", "thread_id": thread, "attempt": attempt, "marker": marker},
        {"row": "turn_started", "k": k, "turn_id": turn, "attempt": attempt, "marker": marker},
    ]


def view(rows: Sequence[dict[str, Any]], **kwargs: Any) -> CallDetail:
    call = next(row["call"] for row in rows if row.get("row") == "prepared")
    state = replay(rows).calls[call]
    kwargs.setdefault("backend", "session")
    kwargs.setdefault("run_ended", False)
    return call_detail("r", state, rows, **kwargs)


def test_a_call_answered_at_its_first_turn() -> None:
    """spec: STEP-10 (the packet's path and digest, as the step row records them),
    CMD-START-1 (the view reads nothing: what it shows came in)."""
    rows = rows_of(
        prepared(),
        spawn(),
        *bound(),
        {
            "row": "completed",
            "result": {"ok": True},
            "result_digest": "sha256:aa",
            "tokens": {"input": 7, "cached_input": 2, "output": 3, "total": 10},
            "attempt": 1,
            "k": 1,
        },
    )
    schema = SchemaView("file", "/w/s.json", SCHEMA, None)
    detail = view(rows, packets={PACKET: "the task"}, schema=schema)
    assert (detail.call, detail.node, detail.role, detail.backend) == (
        "a.1",
        "a",
        "explorer",
        "session",
    )
    assert (detail.state, detail.reason, detail.attempt, detail.turns) == ("completed", None, 1, 1)
    (attempt,) = detail.attempts
    assert (attempt.n, attempt.started_at, attempt.ended_at, attempt.lost) == (
        1,
        _at(2),
        _at(5),
        None,
    )
    (step,) = attempt.steps
    assert (step.packet, step.packet_digest, step.packet_text) == (PACKET, "sha256:00", "the task")
    assert step.action == "spawn" and step.published == 1 and not step.repair
    (turn,) = attempt.turns
    assert (turn.turn_id, turn.thread_id, turn.outcome) == ("tu-1", "th-1", "answered")
    assert (turn.started_at, turn.ended_at) == (_at(4), _at(5))
    parts = {"input": 7, "cached_input": 2, "output": 3, "reasoning_output": 0, "total": 10}
    assert turn.tokens == parts and detail.tokens == parts
    assert detail.answer is not None and detail.answer.result == {"ok": True}
    assert (detail.answer.k, detail.answer.attempt) == (1, 1)
    assert detail.schema == schema and detail.repairs == ()
    assert (detail.workspace.path, detail.workspace.kind) == (P, "directory")
    assert [entry.kind for entry in detail.rows] == [row["row"] for row in rows]
    assert json.loads(json.dumps(detail.to_json()))["attempts"][0]["turns"][0]["outcome"] == (
        "answered"
    )


def test_a_packet_that_cannot_be_read_says_why() -> None:
    rows = rows_of(prepared(), spawn())
    detail = view(rows, packets={PACKET: FileNotFoundError(2, "No such file", PACKET)})
    (step,) = detail.attempts[0].steps
    assert step.packet_text is None and "No such file" in (step.packet_error or "")
    assert detail.attempts[0].ended_at is None  # the call runs still


def repair_step(errors: list[str], bad: str) -> dict[str, Any]:
    """The send_input repair row as the run writes it: the answer out of its input."""
    text = "crw-flow-op: a.1/t2-a1\n" + repair_text(errors, bad, SCHEMA)
    step = StepPublished(
        k=2,
        op="a.1/t2",
        marker="a.1/t2-a1",
        attempt=1,
        action="send_input",
        input=text,
        agent_id="th-1",
        previous_answer=bad,
        call_tokens={"input": 5, "output": 1, "total": 6},
        conversation_turn=2,
        repair=True,
    )
    folded = dump_row(step_input.fold(step))
    assert "input_answer_at" in folded
    return folded


def test_a_repaired_call_shows_the_broken_answer_its_errors_and_the_repair() -> None:
    """spec: STEP-14 (the answer a repair repairs), STEP-17 (conversation turn 2),
    HARV-20 (a part a row leaves out is 0)."""
    errors = ["$: 'ok' is a required property"]
    rows = rows_of(
        prepared(),
        spawn(),
        *bound(),
        repair_step(errors, '{"nope": 1}'),
        {"row": "turn_started", "k": 2, "turn_id": "tu-2", "attempt": 1, "marker": "a.1/t2-a1"},
        {"row": "completed", "result": {"ok": False}, "tokens": {"input": 9, "total": 11}, "k": 2},
    )
    detail = view(rows)
    (repair,) = detail.repairs
    assert repair.errors == tuple(errors)
    assert repair.invalid_answer == '{"nope": 1}'
    assert repair.repaired_answer == {"ok": False}
    assert repair.outcome == "answered"
    first, second = detail.attempts[0].turns
    assert (first.outcome, second.outcome, second.repair) == ("repair", "answered", True)
    assert first.tokens == {
        "input": 5,
        "cached_input": 0,
        "output": 1,
        "reasoning_output": 0,
        "total": 6,
    }
    assert second.tokens is not None and second.tokens["total"] == 5
    step = detail.attempts[0].steps[1]
    assert '{"nope": 1}' in step.input and step.packet is None  # the input the turn was sent


def test_the_errors_a_repair_names_in_its_row_come_first() -> None:
    row = spawn(k=2, repair=True, conversation_turn=2, repair_errors=["$: bad"])
    row["previous_answer"] = "x"
    detail = view(rows_of(prepared(), spawn(), *bound(), row))
    assert detail.repairs[0].errors == ("$: bad",)
    assert detail.repairs[0].repaired_answer is None


def test_a_held_call_answered_retry_goes_on_and_keeps_its_hold_in_the_view() -> None:
    """A turn the host could not finish: its interrupt, the hold, the decision and
    the step published again are each on the view (spec: CMD-START-2, the view
    shows what the rows say and writes none)."""
    rows = rows_of(
        prepared(),
        spawn(),
        *bound(),
        {"row": "interrupt_requested", "reason": "host_failure", "turn_id": "tu-1", "attempt": 1},
        {"row": "held", "reason": "host_failure", "error": "the turn was interrupted"},
        {"row": "decision", "choice": "retry", "reason": "host_failure"},
        spawn(),
        {"row": "turn_started", "k": 1, "turn_id": "tu-2", "attempt": 1, "marker": "a.1/t1-a1"},
        {"row": "completed", "result": {"ok": True}, "tokens": {"total": 4}, "k": 1},
    )
    detail = view(rows)
    assert detail.state == "completed"
    (attempt,) = detail.attempts
    (step,) = attempt.steps
    assert step.published == 2
    first, second = attempt.turns
    assert (first.outcome, first.interrupt) == ("held: host_failure", "host_failure")
    assert second.outcome == "answered"
    assert [note.kind for note in detail.notes] == ["interrupt_requested", "decision"]


def test_a_held_call_of_a_live_run_names_its_answers_and_fix_as_status_does() -> None:
    rows = rows_of(prepared(), spawn(), {"row": "held", "reason": "spawn_failed", "error": "no"})
    detail = view(rows, state_ref="/tmp/s")
    assert (detail.state, detail.reason, detail.error) == ("held", "spawn_failed", "no")
    assert detail.answer_commands is not None
    assert detail.answer_commands["retry"] == "crw flow answer r a.1 --retry --state /tmp/s"
    assert "restart" in detail.answer_commands  # a session run's
    assert detail.fix is not None and detail.fix.startswith("the host refused the spawn")
    ended = view(rows, run_ended=True)
    assert ended.answer_commands is None and ended.fix is None


def test_a_null_model_call_shows_its_schema_errors_and_no_answer() -> None:
    rows = rows_of(
        prepared(),
        spawn(),
        *bound(),
        {
            "row": "null_model",
            "reason": "schema_invalid_after_repair",
            "errors": ["$.ok: 'x' is not of type 'boolean'"],
            "tokens": {"total": 3},
        },
    )
    detail = view(rows)
    assert (detail.state, detail.reason) == ("null_model", "schema_invalid_after_repair")
    assert detail.errors == ("$.ok: 'x' is not of type 'boolean'",)
    assert detail.answer is None
    assert detail.attempts[0].turns[0].outcome == "null_model: schema_invalid_after_repair"


def test_a_lost_attempt_and_the_next_one() -> None:
    rows = rows_of(
        prepared(),
        spawn(),
        *bound(),
        {
            "row": "session_attempt_lost",
            "attempt": 1,
            "agent_id": "th-1",
            "k": 1,
            "turn_id": "tu-1",
            "reason": "turn_interrupted",
        },
        spawn(attempt=2, note="attempt 1: lost"),
        *bound(attempt=2, thread="th-2", turn="tu-2"),
        {"row": "completed", "result": {"ok": True}, "attempt": 2, "k": 1},
    )
    one, two = view(rows).attempts
    assert one.lost is not None and "turn_interrupted" in one.lost
    assert one.turns[0].outcome == "lost: turn_interrupted" and one.ended_at == _at(5)
    assert two.steps[0].note == "attempt 1: lost"
    assert (two.threads[0].thread_id, two.turns[0].thread_id) == ("th-2", "th-2")


def test_a_review_call_shows_its_verdict_and_what_it_judges() -> None:
    rows = rows_of(
        prepared(node="a", role="reviewer", review="a.1"),
        spawn(),
        *bound(),
        {"row": "completed", "result": {"verdict": "reject", "findings": ["x", "y"]}},
        call="a.2",
    )
    detail = view(rows, judged="a.1")
    assert detail.review == {"of": "a.1", "verdict": "reject", "findings": 2}
    assert detail.reviews == "a.1"


def test_an_executor_on_git_shows_its_crw_commit_and_changed_files() -> None:
    """spec: HARV-54 (crw.commit of the pending tree on the commit P was to be at)."""
    allocation = {
        "workspace": P,
        "kind": "worktree",
        "start_commit": "c0",
        "branch": "refs/heads/crw/r/a.1",
    }
    commit = {
        "node": "a",
        "tree": "t1",
        "start": "c0",
        "head": "c0",
        "head_ref": "refs/heads/crw/r/a.1",
        "commit": "c1",
        "when": 1796565106,
        "node_ref": "refs/crw/flow/r/nodes/a",
    }
    rows = rows_of(
        prepared(role="executor", allocation=allocation),
        spawn(),
        *bound(),
        {"row": "completed", "result": {"ok": True}, "pending_tree": "t1"},
        {"row": "crw_commit"} | commit,
    )
    changed = (ChangedFile("src/x.py", "modified"), ChangedFile("new.txt", "added"))
    w = view(rows, changed=changed).workspace
    assert (w.path, w.kind, w.start_commit, w.branch) == (P, "worktree", "c0", allocation["branch"])
    assert w.commit == commit and w.pending_tree == "t1"
    assert w.changed_files == changed and w.changed_error is None
    unread = view(rows, changed="the repository cannot be read").workspace
    assert unread.changed_files is None and unread.changed_error is not None


def test_a_session_wake_of_the_call_is_a_note() -> None:
    rows = rows_of(prepared(), spawn())
    wake = {"seq": 3, "at": _at(3), "row": "session_wake", "ops": ["a.1/t1"], "wake_id": "w"}
    detail = view([*rows, wake])
    assert [note.kind for note in detail.notes] == ["session_wake"]
    assert detail.rows[-1].call is None


CALL_KINDS = sorted(
    set(ROW_KINDS)
    - {"started", "paused", "cancelled", "ended", "role_store_changed", "policy_repinned"}
)
"""Every kind of row a call can have (docs/rows.md): all but the run's own."""


def test_every_kind_of_row_a_call_can_have_is_in_the_view() -> None:
    """Each row of the call is in `rows` with the line `crw flow show` gives it, and
    each that is neither a step, a bind, a turn nor an end is a note too."""
    kinds = ["prepared", *(kind for kind in CALL_KINDS if kind != "prepared")]
    rows = rows_of(*({"row": kind} for kind in kinds))
    detail = view(rows)
    assert [entry.kind for entry in detail.rows] == kinds
    assert all(entry.detail is not None for entry in detail.rows)
    assert {note.kind for note in detail.notes} == set(kinds) & NOTE_ROWS
    assert set(CALL_KINDS) - {"prepared"} - NOTE_ROWS == {
        "step_published",
        "thread_started",
        "turn_started",
        "session_attempt_lost",
        "completed",
        "crw_commit",
        "null_model",
        "held",
        "superseded",
    }


def test_a_review_held_rejected_keeps_the_reviewers_answer() -> None:
    rows = rows_of(
        prepared(role="reviewer", review="a.0"),
        spawn(),
        *bound(),
        {
            "row": "held",
            "reason": "review_rejected",
            "result": {"verdict": "reject", "findings": ["x"]},
        },
    )
    detail = view(rows, judged="a.0")
    assert (detail.state, detail.reason) == ("held", "review_rejected")
    assert detail.answer is not None and detail.answer.result["verdict"] == "reject"
    assert detail.review == {"of": "a.0", "verdict": "reject", "findings": 1}
