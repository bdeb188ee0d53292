"""The row catalogue: every kind reads, writes back unchanged, and is documented."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator  # type: ignore[import-untyped]
from pydantic import ValidationError

from crw.journal.rows import (
    NO_TOKENS,
    ROW_KINDS,
    TOKEN_PARTS,
    Completed,
    Held,
    RoleStoreChanged,
    RowModel,
    Started,
    StepPublished,
    StepUnwritten,
    Tokens,
    TurnStarted,
    UnknownRow,
    backend_of,
    dump_row,
    parse_row,
    rows_json_schema,
)

DOCS = Path(__file__).parents[2] / "docs" / "rows.md"

TOKENS = {"input": 1200, "cached_input": 800, "output": 300, "reasoning_output": 120, "total": 1500}
PAIRS = {"executor": {"agent_type": "executor", "model": "gpt-5", "effort": "high"}}
DIGEST = "sha256:" + "ab" * 32
AT = "2025-01-01T10:00:00Z"
TURN = {"k": 1, "op": "build.1/t1", "marker": "build.1/t1-a1", "attempt": 1}
TRACE = {"before": DIGEST, "after": "sha256:" + "cd" * 32, "where": "/work/p"}

# One line of each kind with every field the catalogue declares for it set.
SAMPLES: dict[str, dict[str, Any]] = {
    "started": {
        "backend": "session",
        "process": "7f3a",
        "pid": 4242,
        "role_pairs": PAIRS,
        "policy_digest": DIGEST,
        "inputs": {"issue": {"path": "/work/issue.md", "digest": DIGEST}, "attempts": 2},
        "multi_agent": "multi_agent_v2",
    },
    "prepared": {
        "node": "build",
        "role": "executor",
        "backend": "session",
        "allocation": {"workspace": "/work/p", "kind": "worktree", "start_commit": "c0ffee"},
        "input_digest": DIGEST,
        "ordinal": 3,
        "resume": "build.1",
        "review": "build.2",
    },
    "completed": {
        "result": {"files": ["a.py"], "notes": None},
        "result_digest": DIGEST,
        "raw_text": 'Done.\n{"files": ["a.py"], "notes": null}',
        "result_span": [6, 40],
        "extracted": True,
        "tokens": TOKENS,
        "pending_tree": "7ree",
        "executor_head_moved": {
            "start": "c0ffee",
            "head": "beef",
            "ref": "refs/crw/flow/r1/stray/build/a1-build.1",
        },
        "attempt": 1,
        "k": 2,
    },
    "reused": {
        "node": "build",
        "role": "executor",
        "source_run": "fix-issue-20250101-100000-ab12",
        "source_call": "build.2",
        "result_digest": DIGEST,
        "saved_tokens": TOKENS,
        "review": "build.1",
    },
    "crw_commit": {
        "node": "build",
        "tree": "7ree",
        "start": "c0ffee",
        "head": "beef",
        "head_ref": "refs/heads/crw/r1/build",
        "commit": "c0de",
        "when": 1700000000,
        "node_ref": "refs/crw/flow/r1/nodes/build",
        "node_old": "c0ffee",
    },
    "null_model": {
        "reason": "answer_too_large",
        "tokens": TOKENS,
        "errors": ["$: the answer is 2,048 bytes, over answer_max_bytes (1,024)"],
        "answer_bytes": 2048,
        "answer_max_bytes": 1024,
    },
    "held": {"reason": "host_failure", "error": "thread/read: connection reset", "tokens": TOKENS},
    "superseded": {"by": "build.2", "tokens": TOKENS},
    "paused": {
        "reason": "write_failed",
        "error": "No space left on device (ENOSPC)",
        "file": "/s/flow/r/replies/.r1.tmp",
        "tokens": TOKENS,
        "token_ceiling": 1000,
        "request": "8f14e45fceea167a5a36dedd4bea2543",
    },
    "cancelled": {
        "reason": "cancelled",
        "request": "8f14e45fceea167a5a36dedd4bea2543",
        "state": {"build": "held"},
    },
    "decision": {"choice": "restart", "reason": "host_failure", "by": "build.2"},
    "ended": {"status": "completed", "state": {"build": "completed"}},
    "step_published": {
        **TURN,
        "action": "send_input",
        "input": "Your answer did not match the schema.",
        "input_answer_at": 37,
        "input_digest": DIGEST,
        "packet": "steps/build.1/packet-t1-a1.md",
        "packet_digest": DIGEST,
        "role": "executor",
        "agent_type": "executor",
        "model": "gpt-5",
        "effort": "high",
        "workspace": "/work/p",
        "agent_id": "agent-1",
        "note": "attempt 1 was cut off",
        "previous_answer": {"files": 3},
        "previous_answer_in": "build.1/t2-a1",
        "tokens_seen": TOKENS,
        "call_tokens": TOKENS,
        "conversation_turn": 2,
        "replaces_turn": "build.1/t1-a1",
        "repair": True,
        "repair_errors": ["$.summary: required"],
        "evidence_assignment": {"call": "build.1", "receipt": None},
        "evidence_cwds": ["/work/p"],
        "evidence_ignored": ["/work/owner"],
    },
    "thread_started": {
        "thread_id": "thr-9",
        "model": "gpt-5",
        "effort": "high",
        "cwd": "/work/p",
        "host_cwd": "/work/owner",
        "evidence_cwd": "/work/p",
        "parent_thread_id": "thr-owner",
        "agent_role": "executor",
        "attempt": 1,
        "via": "session",
        "rollout_path": "/home/u/.codex/sessions/rollout-thr-9.jsonl",
        "marker": "build.1/t1-a1",
        "prior_pairs": [{"model": "gpt-5-mini", "effort": "low"}],
        "pair_unchecked": False,
        "effort_unchecked": True,
        "session_agent_role_mismatch": False,
    },
    "turn_started": {
        **TURN,
        "turn_id": "turn-3",
        "conversation_turn": 1,
        "replaces_turn": 1,
        "host_started_at": 1795982910,
        "trace": {"workspace": DIGEST, "outside": DIGEST, "checkout": "/src", "shared": DIGEST},
    },
    "interrupt_requested": {
        "reason": "paused",
        "op": "build.1/t1",
        "attempt": 1,
        "turn_id": "turn-3",
        "error": "the model cannot be reached: the host said Reconnecting...",
    },
    "session_attempt_lost": {
        "attempt": 1,
        "agent_id": "agent-1",
        "k": 1,
        "turn_id": "turn-3",
        "reason": "unchanged_for_lost_after",
        "host_status": "notLoaded",
        "turn_status": "inProgress",
    },
    "evidence_placed": {
        "evidence_assignment": {"call": "build.1"},
        "evidence_cwd": "/work/owner",
        "attempt": 1,
        "marker": "build.1/t1-a1",
    },
    "checkpoint_started": {"handle": "build.1", "branch": "crw/flow/r1/checkpoint/build"},
    "tokens_unmeasured": {**TURN, "pauses": False, "error": "rollout unreadable"},
    "session_wake": {
        "batch": "b-5e1f",
        "wake_id": "run:r1/b-5e1f/e2",
        "renotify": 3,
        "ops": ["build.1/t1", "review.2/t1"],
        "owner": "thr-owner",
        "owner_status": "idle",
        "waiting_seconds": 900.5,
        "staged": False,
        "error": "outbox full",
        "reason": "already_held",
    },
    "message_delivery": {
        "wake_id": "run:r1/b-5e1f",
        "status": "delivered",
        "error": "none",
        "via": "resume_turn",
        "turn_id": "turn-9",
    },
    "session_host_warning": {
        "op": "build.1/t1",
        "warnings": ["no_ledger_line", "ledger_op_differs", "several_spawns", "window_ended"],
    },
    "role_store_changed": {"pinned_digest": DIGEST, "store_digest": "sha256:" + "ef" * 32},
    "policy_repinned": {
        "pinned_digest": DIGEST,
        "store_digest": "sha256:" + "ef" * 32,
        "role_pairs": PAIRS,
    },
    "escalation": {
        "reason": "session_unresponsive",
        "owner": "thr-owner",
        "ops": ["build.1/t1"],
        "batch": "b-5e1f",
        "waiting_seconds": 7200.0,
    },
    "step_unwritten": {
        "marker": "build.1/t1-a1",
        "k": 1,
        "attempt": 1,
        "action": "spawn",
        "input_state": "not_delivered",
        "error": "No space left on device",
        "failures": 10,
        "first_at": AT,
        "last_at": "2025-01-01T10:05:00Z",
        "written": True,
    },
    "read_role_wrote": TRACE,
    "executor_wrote_outside": TRACE,
    "shared_state_changed": TRACE,
}


def line(kind: str, seq: int = 7, **fields: Any) -> dict[str, Any]:
    """A journal line of `kind`: the head members, then its sample fields."""
    return {"seq": seq, "at": AT, "row": kind, "call": "build.1", **SAMPLES[kind], **fields}


def round_trip(data: dict[str, Any]) -> dict[str, Any]:
    """What the journal writes back for a line it read: through JSON text both ways."""
    read = parse_row(json.loads(json.dumps(data)))
    written: dict[str, Any] = json.loads(json.dumps(dump_row(read)))
    return written


def test_samples_cover_every_kind_and_every_field() -> None:
    assert set(SAMPLES) == set(ROW_KINDS)
    for kind, model in ROW_KINDS.items():
        declared = set(model.model_fields) - {"seq", "at", "call", "row"}
        assert declared == set(SAMPLES[kind]), kind


def test_each_kind_is_tagged_with_its_row_name() -> None:
    for kind, model in ROW_KINDS.items():
        assert model.model_fields["row"].default == kind
        assert dump_row(model())["row"] == kind


@pytest.mark.parametrize("kind", sorted(SAMPLES))
def test_every_kind_reads_as_its_model_and_writes_back_unchanged(kind: str) -> None:
    data = line(kind)
    read = parse_row(data)
    assert type(read) is ROW_KINDS[kind]
    assert read.model_extra == {}
    assert round_trip(data) == data


def test_written_line_starts_with_seq_at_row_call() -> None:
    read = parse_row({"k": 1, "call": "build.1", "row": "turn_started", "at": AT, "seq": 3})
    assert list(dump_row(read)) == ["seq", "at", "row", "call", "k"]


def test_a_field_left_unset_is_left_out_of_the_line() -> None:
    assert dump_row(TurnStarted(call="build.1", k=1)) == {
        "row": "turn_started",
        "call": "build.1",
        "k": 1,
    }


def test_unknown_fields_survive_a_round_trip_unchanged() -> None:
    data = line(
        "prepared",
        later_field="kept",
        later_null=None,
        later_nested={"a": [1, {"b": None}], "c": None},
        allocation={
            "workspace": "/work/p",
            "kind": "worktree",
            "start_commit": "c0ffee",
            "later_part": None,
            "later_object": {"d": None},
        },
    )
    read = parse_row(data)
    assert read.model_extra == {
        "later_field": "kept",
        "later_null": None,
        "later_nested": {"a": [1, {"b": None}], "c": None},
    }
    assert round_trip(data) == data


def test_unknown_token_members_survive_a_round_trip_unchanged() -> None:
    data = line("completed", tokens={"input": 5, "cache_write_input": 2, "later": None})
    assert round_trip(data) == data


def test_unknown_kind_reads_as_unknown_row_and_writes_back_unchanged() -> None:
    data = {
        "seq": 9,
        "at": AT,
        "row": "kind_of_a_later_crw",
        "call": "build.1",
        "anything": {"nested": [None, 1, "x"]},
        "nothing": None,
    }
    read = parse_row(data)
    assert isinstance(read, UnknownRow)
    assert read.row == "kind_of_a_later_crw"
    assert round_trip(data) == data


def test_a_line_without_a_kind_is_refused() -> None:
    with pytest.raises(ValidationError):
        parse_row({"seq": 1, "at": AT})
    with pytest.raises(ValidationError):
        parse_row({"seq": 1, "row": ["started"]})


def test_a_known_field_of_the_wrong_type_is_refused() -> None:
    with pytest.raises(ValidationError):
        parse_row(line("turn_started", k="first"))


def test_a_reason_a_later_crw_adds_still_reads() -> None:
    read = parse_row(line("held", reason="a_reason_of_a_later_crw"))
    assert isinstance(read, Held)
    assert read.reason == "a_reason_of_a_later_crw"


@pytest.mark.parametrize(
    ("kind", "field", "value"),
    [
        ("step_published", "action", "fork"),
        ("step_unwritten", "input_state", "delivered"),
        ("session_host_warning", "warnings", ["no_ledger_line", "something_else"]),
        ("null_model", "reason", "timeout"),
        ("decision", "choice", "maybe"),
    ],
)
def test_a_value_outside_a_set_the_spec_fixes_is_refused(kind: str, field: str, value: Any) -> None:
    with pytest.raises(ValidationError):
        parse_row(line(kind, **{field: value}))


def test_token_parts_that_are_zero_are_left_out_of_the_row() -> None:
    """spec: HARV-19"""
    row = Completed(call="build.1", tokens=Tokens(input=10, output=4, total=14))
    assert dump_row(row)["tokens"] == {"input": 10, "output": 4, "total": 14}
    assert dump_row(Held(tokens=Tokens()))["tokens"] == {}


def test_token_parts_missing_from_an_older_row_read_as_zero() -> None:
    """spec: HARV-20"""
    read = parse_row({"seq": 4, "row": "completed", "call": "build.1", "tokens": {"total": 14}})
    assert isinstance(read, Completed)
    assert read.tokens == Tokens(total=14)
    assert read.tokens is not None
    assert [getattr(read.tokens, part) for part in TOKEN_PARTS] == [0, 0, 0, 0, 14]


def test_tokens_add_and_subtract_part_by_part() -> None:
    seen = Tokens(input=100, cached_input=60, output=10, total=110)
    now = Tokens(input=150, cached_input=90, output=25, reasoning_output=5, total=175)
    assert now - seen == Tokens(input=50, cached_input=30, output=15, reasoning_output=5, total=65)
    assert seen + (now - seen) == now


def test_started_row_without_backend_reads_as_app_server() -> None:
    """spec: GEN-10"""
    read = parse_row({"seq": 1, "at": AT, "row": "started", "pid": 12})
    assert isinstance(read, Started)
    assert backend_of(read) == "app-server"
    assert backend_of(Started(backend="session")) == "session"


def test_role_store_changed_row_of_an_older_journal_reads() -> None:
    """spec: ROWS-16"""
    data = {
        "seq": 30,
        "at": AT,
        "row": "role_store_changed",
        "pinned_digest": DIGEST,
        "store_digest": "sha256:" + "ef" * 32,
    }
    read = parse_row(data)
    assert isinstance(read, RoleStoreChanged)
    assert (read.pinned_digest, read.store_digest) == (DIGEST, "sha256:" + "ef" * 32)
    assert round_trip(data) == data


def test_step_unwritten_records_the_step_not_delivered_and_its_failures() -> None:
    """spec: ROWS-18"""
    warning = StepUnwritten(
        call="build.1",
        marker="build.1/t1-a1",
        k=1,
        attempt=1,
        action="spawn",
        error="No space left on device",
        failures=1,
        first_at=AT,
        last_at=AT,
    )
    assert dump_row(warning) == {
        "row": "step_unwritten",
        "call": "build.1",
        "marker": "build.1/t1-a1",
        "k": 1,
        "attempt": 1,
        "action": "spawn",
        "input_state": "not_delivered",
        "error": "No space left on device",
        "failures": 1,
        "first_at": AT,
        "last_at": AT,
    }
    closing = warning.model_copy(update={"failures": 12, "written": True})
    assert dump_row(closing)["written"] is True


def test_step_published_carries_its_conversation_place_and_the_repair_member() -> None:
    read = parse_row(line("step_published"))
    assert isinstance(read, StepPublished)
    assert (read.conversation_turn, read.replaces_turn, read.repair) == (2, "build.1/t1-a1", True)
    assert read.tokens_seen == Tokens(**TOKENS)


def test_rows_json_schema_is_valid_draft_2020_12_and_lists_every_kind() -> None:
    schema = rows_json_schema()
    Draft202012Validator.check_schema(schema)
    kinds = {
        definition["properties"]["row"]["const"]
        for definition in schema["$defs"].values()
        if "const" in definition.get("properties", {}).get("row", {})
    }
    assert kinds == set(ROW_KINDS)
    json.dumps(schema)


@pytest.mark.parametrize("kind", sorted(SAMPLES))
def test_every_written_row_matches_the_schema(kind: str) -> None:
    validator = Draft202012Validator(rows_json_schema())
    validator.validate(round_trip(line(kind)))


def test_the_schema_takes_an_unknown_kind_and_refuses_a_wrong_field() -> None:
    validator = Draft202012Validator(rows_json_schema())
    validator.validate({"seq": 1, "row": "kind_of_a_later_crw", "x": None})
    assert not validator.is_valid(line("turn_started", k="first"))
    assert not validator.is_valid({"seq": 1, "at": AT})


def test_docs_head_every_kind_and_no_other() -> None:
    headings = set(re.findall(r"^### `([a-z_]+)`$", DOCS.read_text(), flags=re.MULTILINE))
    assert headings == set(ROW_KINDS)


def test_every_kind_is_a_row_model() -> None:
    assert all(issubclass(model, RowModel) for model in ROW_KINDS.values())


def test_tokens_arithmetic_and_the_zero_tokens_validate_nothing(monkeypatch: Any) -> None:
    """A call's tokens are added and taken from valid Tokens many times a call: the
    sum and the difference are built from their ints without the validator, and
    equal (and dump as) the validated Tokens."""
    a, b = Tokens(input=3, total=5), Tokens(output=2, total=1)

    class Refusing:
        def validate_python(self, *args: Any, **kwargs: Any) -> Any:
            raise AssertionError("validated")

    monkeypatch.setattr(Tokens, "__pydantic_validator__", Refusing())
    total, less = a + b, a - b
    assert (total.input, total.output, total.total) == (3, 2, 6)
    assert less.model_dump() == {"input": 3, "output": -2, "total": 4}
    assert NO_TOKENS.model_dump() == {} and NO_TOKENS + a == a
    monkeypatch.undo()
    assert total == Tokens(input=3, output=2, total=6) and Tokens() == NO_TOKENS


def test_tokens_sums_are_made_as_model_construct_makes_them_without_it(monkeypatch: Any) -> None:
    """The run settles each call's tokens with two sums: a sum is set directly,
    every pydantic slot as `Tokens.model_construct` sets it (which walks the fields
    in Python, five times the CPU)."""
    a, b = Tokens(input=3, cached_input=1, total=5), Tokens(output=2, total=1)
    made = Tokens.model_construct(input=3, cached_input=1, output=2, reasoning_output=0, total=6)

    def refused(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("model_construct")

    monkeypatch.setattr(Tokens, "model_construct", refused)
    total, less = a + b, a - b
    monkeypatch.undo()
    for slot in (
        "__dict__",
        "__pydantic_fields_set__",
        "__pydantic_extra__",
        "__pydantic_private__",
    ):
        assert getattr(total, slot) == getattr(made, slot)
    assert total.model_dump_json() == '{"input":3,"cached_input":1,"output":2,"total":6}'
    assert less.model_dump() == {"input": 3, "cached_input": 1, "output": -2, "total": 4}
    assert total.model_copy(update={"input": 4}).input == 4 and total == made
