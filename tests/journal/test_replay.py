"""replay(rows) -> RunState: the read model every view goes through."""

from __future__ import annotations

from typing import Any

from crw.journal.replay import replay, token_parts


def _rows(*rows: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"seq": seq, "at": "t", **row} for seq, row in enumerate(rows, start=1)]


STARTED = {"row": "started", "backend": "session", "process": "p1", "pid": 7}


def test_no_started_row_is_a_starting_run() -> None:
    assert replay([]).state == "starting"
    assert replay([]).backend is None


def test_started_row_without_backend_reads_as_app_server() -> None:
    """spec: GEN-10"""
    run = replay(_rows({"row": "started", "pid": 1}))
    assert run.backend == "app-server"
    assert run.state == "running"


def test_started_row_records_backend_process_and_pins() -> None:
    """spec: GEN-8"""
    run = replay(
        _rows(
            {
                **STARTED,
                "role_pairs": {"explorer": {"agent_type": "explorer"}},
                "policy_digest": "d",
            }
        )
    )
    assert (run.backend, run.process, run.pid, run.processes) == ("session", "p1", 7, 1)
    assert run.role_pairs == {"explorer": {"agent_type": "explorer"}}
    assert run.policy_digest == "d"


def test_each_started_row_counts_a_process() -> None:
    run = replay(_rows(STARTED, {**STARTED, "process": "p2"}))
    assert (run.processes, run.process) == (2, "p2")


def test_missing_token_parts_read_as_zero() -> None:
    """spec: HARV-20"""
    assert token_parts({"input": 5}) == {
        "input": 5,
        "cached_input": 0,
        "output": 0,
        "reasoning_output": 0,
        "total": 0,
    }
    assert token_parts(None)["total"] == 0


def test_session_call_walks_through_its_states() -> None:
    rows = _rows(
        STARTED,
        {
            "row": "prepared",
            "call": "a.1",
            "node": "a",
            "role": "explorer",
            "backend": "session",
            "allocation": {"workspace": "/w/a.1", "kind": "checkout"},
        },
        {"row": "step_published", "call": "a.1", "k": 1, "attempt": 1, "action": "spawn"},
    )
    run = replay(rows)
    call = run.calls["a.1"]
    assert (call.node, call.role, call.workspace, call.state) == (
        "a",
        "explorer",
        "/w/a.1",
        "waiting_session",
    )
    assert run.state == "waiting_session"

    rows += _rows(
        {
            "row": "thread_started",
            "call": "a.1",
            "thread_id": "th",
            "attempt": 1,
            "model": "m",
            "effort": "high",
        },
        {"row": "turn_started", "call": "a.1", "k": 1, "turn_id": "tu", "attempt": 1},
    )
    run = replay(rows)
    assert (run.calls["a.1"].state, run.calls["a.1"].turns, run.state) == ("running", 1, "running")

    rows += _rows(
        {"row": "step_published", "call": "a.1", "k": 2, "attempt": 1, "action": "send_input"},
        {"row": "turn_started", "call": "a.1", "k": 2, "turn_id": "tu2", "attempt": 1},
        {
            "row": "completed",
            "call": "a.1",
            "result": {"files": []},
            "tokens": {"input": 10, "total": 12, "output": 2},
        },
    )
    run = replay(rows)
    call = run.calls["a.1"]
    assert (call.state, call.turns, call.k, call.result) == ("completed", 2, 2, {"files": []})
    assert call.tokens["total"] == 12 and call.tokens["cached_input"] == 0


def test_call_pair_is_its_newest_thread_started_rows() -> None:
    """spec: BIND-8, BIND-9"""
    rows = _rows(
        STARTED,
        {"row": "prepared", "call": "b.1", "node": "b", "role": "executor"},
        {"row": "thread_started", "call": "b.1", "attempt": 1, "model": "m1", "effort": "low"},
        {
            "row": "thread_started",
            "call": "b.1",
            "attempt": 2,
            "model": "m2",
            "effort": "high",
            "prior_pairs": [{"model": "m1", "effort": "low"}],
        },
    )
    call = replay(rows).calls["b.1"]
    assert call.pair == {"model": "m2", "effort": "high"}
    assert call.prior_pairs == [{"model": "m1", "effort": "low"}]
    assert call.attempt == 2


def test_run_spent_counts_each_terminal_row_once() -> None:
    rows = _rows(
        STARTED,
        {"row": "prepared", "call": "a.1"},
        {"row": "completed", "call": "a.1", "tokens": {"input": 3, "total": 3}},
        {"row": "prepared", "call": "b.1"},
        {
            "row": "null_model",
            "call": "b.1",
            "reason": "context_window_exceeded",
            "tokens": {"output": 4, "total": 4},
        },
    )
    run = replay(rows)
    assert run.spent["total"] == 7 and run.spent["input"] == 3 and run.spent["output"] == 4
    assert run.calls["b.1"].reason == "context_window_exceeded"


def test_held_call_waits_for_a_decision() -> None:
    rows = _rows(
        STARTED,
        {"row": "prepared", "call": "a.1"},
        {"row": "held", "call": "a.1", "reason": "host_failure"},
    )
    assert replay(rows).state == "waiting_decision"
    assert (
        replay(rows + _rows({"row": "decision", "call": "a.1", "choice": "skip"}))
        .calls["a.1"]
        .state
        == "skipped"
    )
    assert (
        replay(rows + _rows({"row": "decision", "call": "a.1", "choice": "retry"})).state
        == "running"
    )


def test_paused_run_runs_again_when_a_process_starts() -> None:
    rows = _rows(STARTED, {"row": "paused", "reason": "usage_limit"})
    assert replay(rows).state == "paused"
    assert replay(rows + _rows(STARTED)).state == "running"


def test_ended_run_reports_its_status() -> None:
    run = replay(_rows(STARTED, {"row": "ended", "status": "completed", "state": "ok"}))
    assert (run.state, run.ended_status) == ("ended", "completed")


def test_unknown_kinds_and_fields_are_passed_over() -> None:
    rows = _rows(
        STARTED,
        {"row": "from_the_future", "call": "z.1", "x": 1},
        {"row": "prepared", "call": "a.1", "new_field": [1]},
    )
    run = replay(rows)
    assert list(run.calls) == ["a.1"]
    assert run.last_seq == 3


def test_a_calls_tokens_sum_over_every_terminal_row_it_has() -> None:
    """A call held and retried ends twice: its tokens and the run's are the sum of
    both rows, every part, and a call's first terminal row counts its own parts."""
    rows = _rows(
        STARTED,
        {"row": "prepared", "call": "a.1"},
        {"row": "held", "call": "a.1", "reason": "host_failure", "tokens": {"input": 5}},
        {"row": "decision", "call": "a.1", "choice": "retry"},
        {"row": "completed", "call": "a.1", "tokens": {"input": 2, "output": 1, "total": 3}},
        {"row": "prepared", "call": "b.1"},
        {"row": "completed", "call": "b.1", "tokens": {"cached_input": 4, "total": 9}},
    )
    run = replay(rows)
    assert run.calls["a.1"].tokens == {
        "input": 7,
        "cached_input": 0,
        "output": 1,
        "reasoning_output": 0,
        "total": 3,
    }
    assert run.calls["b.1"].tokens == token_parts({"cached_input": 4, "total": 9})
    assert run.spent == {
        "input": 7,
        "cached_input": 4,
        "output": 1,
        "reasoning_output": 0,
        "total": 12,
    }
    assert list(run.calls["b.1"].tokens) == list(run.spent) == list(token_parts({}))


def test_last_seq_is_the_newest_row_that_names_one_from_a_list_or_any_iterable() -> None:
    """A row without a seq (a row a caller made, not read from a journal) leaves the
    last seq at the newest row before it that names one; a fold of a generator and
    a fold on from an earlier state read the same."""
    rows = [*_rows(STARTED, {"row": "prepared", "call": "a.1"}), {"row": "note"}]
    assert replay(rows).last_seq == 2
    assert replay(row for row in rows).last_seq == 2
    assert replay([{"row": "note"}], into=replay(rows[:1])).last_seq == 1
    assert replay([{"row": "note", "seq": 0}]).last_seq == 0
