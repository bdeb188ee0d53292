"""Failed turns and what they do; the tokens a turn counted."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from crw.engine.answers.outcome import (
    FailureOutcome,
    codex_error_kind,
    failure_outcome,
    read_rollout_total,
    tokens_from_rollout,
    tokens_from_usage,
    turn_failed,
    turn_tokens,
)
from crw.journal.rows import Completed, Tokens


def token_line(total: dict[str, int] | None) -> dict[str, Any]:
    info = None if total is None else {"total_token_usage": total, "last_token_usage": total}
    return {
        "timestamp": "2026-11-29T10:00:00.000Z",
        "type": "event_msg",
        "payload": {"type": "token_count", "info": info},
    }


def usage(n: int) -> dict[str, int]:
    return {
        "input_tokens": 100 * n,
        "cached_input_tokens": 40 * n,
        "cache_write_input_tokens": 7,
        "output_tokens": 10 * n,
        "reasoning_output_tokens": 3 * n,
        "total_tokens": 110 * n,
    }


def write_rollout(path: Path, lines: list[dict[str, Any] | str]) -> Path:
    text = "\n".join(line if isinstance(line, str) else json.dumps(line) for line in lines)
    path.write_text(text + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("status", "has_error", "failed"),
    [
        ("failed", True, True),
        ("failed", False, True),
        ("interrupted", True, True),
        ("interrupted", False, False),
        ("completed", False, False),
    ],
)
def test_failed_or_errored_interrupted_turn_is_a_failure(
    status: str, has_error: bool, failed: bool
) -> None:
    """spec: HARV-11"""
    assert turn_failed(status, has_error) is failed


def test_codex_error_info_is_read_in_both_forms() -> None:
    """spec: HARV-11"""
    assert codex_error_kind("usageLimitExceeded") == "usageLimitExceeded"
    assert codex_error_kind({"httpConnectionFailed": {"httpStatusCode": 502}}) == (
        "httpConnectionFailed"
    )
    assert codex_error_kind(None) is None
    assert codex_error_kind({}) is None


@pytest.mark.parametrize(
    ("kind", "reason"),
    [("usageLimitExceeded", "usage_limit_exceeded"), ("rateLimitExceeded", "rate_limit_exceeded")],
)
def test_failed_turn_with_usage_or_rate_limit_pauses_the_run(kind: str, reason: str) -> None:
    """spec: HARV-12"""
    assert failure_outcome(kind) == FailureOutcome("pause", reason)


def test_failed_turn_with_exceeded_context_window_is_null_model() -> None:
    """spec: HARV-13"""
    assert failure_outcome("contextWindowExceeded") == FailureOutcome(
        "null_model", "context_window_exceeded"
    )


@pytest.mark.parametrize(
    "kind", [None, "serverOverloaded", "internalServerError", "other", "httpConnectionFailed"]
)
def test_failed_turn_with_any_other_error_holds_the_call(kind: str | None) -> None:
    """spec: HARV-14"""
    assert failure_outcome(kind) == FailureOutcome("hold", "host_failure")


def test_token_usage_breakdown_gives_every_part() -> None:
    """spec: HARV-18, HARV-25"""
    breakdown = {
        "totalTokens": 130,
        "inputTokens": 120,
        "cachedInputTokens": 64,
        "cacheWriteInputTokens": 5,
        "outputTokens": 10,
        "reasoningOutputTokens": 4,
    }
    assert tokens_from_usage(breakdown) == Tokens(
        input=120, cached_input=64, output=10, reasoning_output=4, total=130
    )
    assert tokens_from_usage({"totalTokens": 3}) == Tokens(total=3)


def test_rollout_usage_gives_every_part() -> None:
    """spec: HARV-18"""
    assert tokens_from_rollout(usage(1)) == Tokens(
        input=100, cached_input=40, output=10, reasoning_output=3, total=110
    )


def test_rollout_total_is_its_last_token_count_with_info(tmp_path: Path) -> None:
    """spec: HARV-16"""
    path = write_rollout(
        tmp_path / "rollout.jsonl",
        [
            {"type": "session_meta", "payload": {"id": "t"}},
            token_line(usage(1)),
            {"type": "response_item", "payload": {"type": "message", "text": "token_count"}},
            token_line(usage(2)),
            token_line(None),
            {"type": "event_msg", "payload": {"type": "agent_message", "message": "hi"}},
        ],
    )
    assert read_rollout_total(path) == tokens_from_rollout(usage(2))


def test_rollout_line_being_written_is_passed_over(tmp_path: Path) -> None:
    path = write_rollout(
        tmp_path / "rollout.jsonl", [token_line(usage(1)), '{"type": "event_msg", "payl']
    )
    assert read_rollout_total(path) == tokens_from_rollout(usage(1))


def test_rollout_without_token_count_counts_nothing(tmp_path: Path) -> None:
    path = write_rollout(tmp_path / "rollout.jsonl", [{"type": "session_meta", "payload": {}}])
    assert read_rollout_total(path) == Tokens()


def test_unreadable_rollout_is_unmeasured(tmp_path: Path) -> None:
    """spec: HARV-26 (None: the caller writes tokens_unmeasured)"""
    assert read_rollout_total(tmp_path / "missing.jsonl") is None
    assert read_rollout_total(tmp_path) is None
    binary = tmp_path / "binary.jsonl"
    binary.write_bytes(b"\xff\xfe token_count")
    assert read_rollout_total(binary) is None


def test_turn_tokens_subtract_what_earlier_turns_counted_in_every_part() -> None:
    """spec: HARV-16, HARV-17"""
    now = Tokens(input=300, cached_input=120, output=30, reasoning_output=9, total=330)
    before = Tokens(input=100, cached_input=40, output=10, reasoning_output=3, total=110)
    assert turn_tokens(now, before) == Tokens(
        input=200, cached_input=80, output=20, reasoning_output=6, total=220
    )
    assert turn_tokens(now, Tokens()) == now


def test_turn_tokens_never_go_below_zero() -> None:
    assert turn_tokens(Tokens(input=5, total=5), Tokens(input=9, output=2, total=11)) == Tokens()


def test_token_part_that_is_zero_is_left_out_of_the_row() -> None:
    """spec: HARV-19"""
    spent = turn_tokens(Tokens(input=50, output=7, total=57), Tokens(input=10, total=10))
    row = Completed(call="build.1", tokens=spent).model_dump(mode="json", exclude_none=True)
    assert row["tokens"] == {"input": 40, "output": 7, "total": 47}
