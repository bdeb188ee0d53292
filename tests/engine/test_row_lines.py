"""The line `crw flow show` and `watch` print for each kind of journal row."""

from __future__ import annotations

from typing import Any

import pytest

from crw.engine.views.row_lines import DETAILS, row_detail, row_line
from crw.journal.rows import ROW_KINDS, parse_row

TOKENS = {"input": 90, "output": 30, "total": 120}
D1 = "sha256:" + "a" * 64
D2 = "sha256:" + "b" * 64

EXAMPLES: dict[str, tuple[dict[str, Any], str]] = {
    "started": (
        {"backend": "session", "pid": 4242, "role_pairs": {"executor": {}, "reviewer": {}}},
        "session backend, pid 4242, 2 roles pinned",
    ),
    "prepared": (
        {"node": "build", "role": "executor", "resume": "build.1",
         "allocation": {"workspace": "/w/p", "kind": "attempt_worktree"}},
        "node build, role executor, continues build.1, attempt_worktree",
    ),
    "completed": (
        {"attempt": 2, "k": 3, "tokens": TOKENS, "result_digest": D1, "extracted": True,
         "executor_head_moved": {"start": "c" * 40, "head": "d" * 40}},
        f"turn 3, attempt 2, tokens 120, result {'a' * 12}, taken out of prose, "
        f"executor committed {'d' * 12}",
    ),
    "reused": (
        {"node": "build", "role": "executor", "source_run": "r0", "source_call": "build.2",
         "result_digest": "sha256:" + "d" * 64, "saved_tokens": {"total": 812}},
        f"node build, role executor, the answer of r0/build.2, result {'d' * 12}, "
        "tokens 812 not spent again",
    ),
    "crw_commit": (
        {"commit": "e" * 40, "start": "c" * 40, "node_ref": "refs/crw/flow/r1/nodes/build"},
        f"commit {'e' * 12}, on {'c' * 12}, advances refs/crw/flow/r1/nodes/build",
    ),
    "null_model": (
        {"reason": "schema_invalid_after_repair", "tokens": TOKENS,
         "errors": ["'x' is a required property", "other"]},
        "schema_invalid_after_repair, tokens 120: 'x' is a required property",
    ),
    "held": (
        {"reason": "spawn_failed", "error": "unknown agent_type", "tokens": TOKENS},
        "spawn_failed, tokens 120: unknown agent_type",
    ),
    "superseded": ({"by": "build.4", "tokens": TOKENS}, "by build.4, tokens 120"),
    "paused": (
        {"reason": "write_failed", "file": "/r/steps/x", "error": "disk full",
         "token_ceiling": 5000},
        "write_failed: /r/steps/x: disk full, token ceiling 5000",
    ),
    "cancelled": (
        {"reason": "cancelled", "request": "r1",
         "state": {"explore": "completed", "build": "held"}},
        "cancelled, explore completed, build held",
    ),
    "decision": (
        {"choice": "restart", "reason": "deadline", "by": "build.2"},
        "restart, held deadline, runs again as build.2",
    ),
    "ended": (
        {"status": "completed", "state": {"explore": "completed", "build": "completed"}},
        "completed, explore completed, build completed",
    ),
    "step_published": (
        {"k": 2, "op": "build.1/t2", "marker": "build.1/t2-a1", "attempt": 1,
         "action": "send_input", "role": "executor", "model": "gpt-5", "effort": "high",
         "agent_id": "agent-9", "repair": True},
        "send_input build.1/t2-a1 (executor, gpt-5 high), to agent-9, repair",
    ),
    "thread_started": (
        {"thread_id": "th-1", "attempt": 1, "model": "gpt-5", "effort": "low",
         "via": "marker", "agent_role": "worker"},
        "attempt 1: thread th-1, gpt-5 low, via marker, agent role worker",
    ),
    "turn_started": (
        {"k": 1, "attempt": 1, "turn_id": "turn-7f3a", "op": "build.1/t1"},
        "turn 1, attempt 1: turn-7f3a",
    ),
    "interrupt_requested": (
        {"reason": "deadline", "attempt": 2, "turn_id": "turn-8"},
        "deadline: attempt 2, turn turn-8",
    ),
    "session_attempt_lost": (
        {"attempt": 1, "k": 1, "agent_id": "agent-3", "reason": "subagent_gone",
         "host_status": "notLoaded", "turn_status": "interrupted"},
        "turn 1, attempt 1, agent-3: subagent_gone, host notLoaded, turn interrupted",
    ),
    "evidence_placed": (
        {"marker": "build.1/t1-a1", "attempt": 1, "evidence_cwd": "/e/build.1"},
        "build.1/t1-a1, attempt 1: /e/build.1",
    ),
    "checkpoint_started": (
        {"handle": "build.1", "branch": "crw/ck/build.1"},
        "build.1, branch crw/ck/build.1",
    ),
    "tokens_unmeasured": (
        {"pauses": True, "marker": "build.1/t1-a1", "error": "no rollout"},
        "build.1/t1-a1, pauses the run: no rollout",
    ),
    "session_wake": (
        {"wake_id": "w3", "ops": ["a.1/t1", "b.1/t1"], "owner": "own-1",
         "owner_status": "idle", "renotify": 1, "waiting_seconds": 30.0, "staged": True,
         "reason": "steps_ready"},
        "w3, 2 ops, owner own-1, idle, renotify 1, waited 30s, staged: steps_ready",
    ),
    "message_delivery": (
        {"wake_id": "w3", "status": "delivered", "via": "turn", "turn_id": "t-5"},
        "w3, delivered, via turn, turn t-5",
    ),
    "session_host_warning": (
        {"op": "build.1/t1", "warnings": ["no_ledger_line", "several_spawns"]},
        "build.1/t1: no_ledger_line, several_spawns",
    ),
    "role_store_changed": (
        {"pinned_digest": D1, "store_digest": D2},
        f"pinned {'a' * 12} → store {'b' * 12}",
    ),
    "policy_repinned": (
        {"pinned_digest": D1, "store_digest": D2, "role_pairs": {}},
        f"pinned {'a' * 12} → store {'b' * 12}",
    ),
    "escalation": (
        {"reason": "unresponsive", "ops": ["a.1/t1"], "waiting_seconds": 600.0, "owner": "o"},
        "unresponsive: ops a.1/t1, waited 10m00s, owner o",
    ),
    "step_unwritten": (
        {"marker": "a.1/t1-a1", "action": "spawn", "error": "ENOSPC", "failures": 3},
        "spawn a.1/t1-a1, 3 failures: ENOSPC",
    ),
    "read_role_wrote": (
        {"before": D1, "after": D2, "where": "P"},
        f"P: {'a' * 12} → {'b' * 12}",
    ),
    "executor_wrote_outside": (
        {"before": D1, "after": D2, "where": "outside P"},
        f"outside P: {'a' * 12} → {'b' * 12}",
    ),
    "shared_state_changed": (
        {"before": D1, "after": None, "where": "shared"},
        f"shared: {'a' * 12} → -",
    ),
}  # fmt: skip


def test_every_kind_of_the_catalogue_has_its_own_line() -> None:
    assert set(DETAILS) == set(ROW_KINDS) == set(EXAMPLES)


@pytest.mark.parametrize("kind", sorted(EXAMPLES))
def test_each_kind_shows_its_key_fields(kind: str) -> None:
    fields, detail = EXAMPLES[kind]
    row = {"seq": 7, "at": "2026-11-29T10:00:01.234567Z", "row": kind, "call": "build.1"}
    row |= {key: value for key, value in fields.items() if value is not None}
    assert not parse_row(row).model_extra, "the example uses only the catalogue's fields"
    assert row_detail(row) == detail
    assert row_line(row) == f"10:00:01.234     7 build.1        {kind:<20} {detail}"


def test_a_review_calls_prepared_row_names_the_call_it_judges() -> None:
    row = {"row": "prepared", "call": "build.2", "node": "build", "role": "reviewer"}
    assert row_detail(row | {"review": "build.1"}) == "node build, role reviewer, reviews build.1"
    assert row_detail(row) == "node build, role reviewer"  # a reviewer node of its own


def test_a_row_without_its_fields_still_reads() -> None:
    """Every field is optional (a row of an older journal): the line names the kind."""
    for kind in ROW_KINDS:
        assert row_line({"seq": 1, "row": kind}).startswith("-                1 -")


def test_a_kind_a_later_crw_writes_shows_its_fields() -> None:
    row = {"seq": 3, "at": "2026-11-29T10:00:00.000Z", "row": "moon_phase", "phase": "full",
           "n": [1, 2]}  # fmt: skip
    kind = f"{'moon_phase':<20}"
    assert row_line(row) == f"10:00:00.000     3 -              {kind} phase=full n=[1, 2]"


def test_a_long_detail_is_cut() -> None:
    line = row_line({"seq": 1, "row": "held", "reason": "host_failure", "error": "x" * 1000})
    assert line.endswith("x…") and len(line) < 300
