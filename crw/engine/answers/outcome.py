"""How a turn ended: what a failed turn does to the call, and what the turn counted.

A turn that ended failed, or interrupted with an error, is TurnOutcome.Failed with
its codexErrorInfo (session-calls.md, "The harvest"): a usage or rate limit pauses
the run, an exceeded context window is a null_model, any other host failure holds
the call. Its tokens are the thread's running total now less what the thread's
earlier turns counted, in every part.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from crw.journal.rows import NO_TOKENS, Tokens
from crw.rawfile import read_bytes

_PAUSES = {
    "usageLimitExceeded": "usage_limit_exceeded",
    "rateLimitExceeded": "rate_limit_exceeded",
}
CONTEXT_WINDOW_EXCEEDED = "contextWindowExceeded"
HOST_FAILURE = "host_failure"
"""The held reason of a turn the host failed (HARV-14)."""

_USAGE_KEYS = {
    "input": "inputTokens",
    "cached_input": "cachedInputTokens",
    "output": "outputTokens",
    "reasoning_output": "reasoningOutputTokens",
    "total": "totalTokens",
}
_ROLLOUT_KEYS = {
    "input": "input_tokens",
    "cached_input": "cached_input_tokens",
    "output": "output_tokens",
    "reasoning_output": "reasoning_output_tokens",
    "total": "total_tokens",
}


def turn_failed(status: str, has_error: bool) -> bool:
    """Whether a turn that ended with `status` is TurnOutcome.Failed: it failed, or
    it was interrupted with an error (HARV-11). An interrupt without one is not."""
    return status == "failed" or (status == "interrupted" and has_error)


def codex_error_kind(info: object) -> str | None:
    """The kind of a turn error's codexErrorInfo, which the host sends as a string
    (`"usageLimitExceeded"`) or as an object of one key
    (`{"httpConnectionFailed": {"httpStatusCode": 502}}`); None for anything else."""
    if isinstance(info, str):
        return info
    if isinstance(info, Mapping) and len(info) == 1:
        (kind,) = info
        return str(kind)
    return None


@dataclass(frozen=True)
class FailureOutcome:
    """What a failed turn does. `action` pause: the run is paused (the call is
    held paused); null_model: the call ends null_model; hold: the call is held.
    `reason` is the row's."""

    action: Literal["pause", "null_model", "hold"]
    reason: str


def failure_outcome(kind: str | None) -> FailureOutcome:
    """The outcome of a failed turn whose codexErrorInfo is `kind` (None when the
    turn failed without one): HARV-12, HARV-13, HARV-14."""
    if kind in _PAUSES:
        return FailureOutcome("pause", _PAUSES[kind])
    if kind == CONTEXT_WINDOW_EXCEEDED:
        return FailureOutcome("null_model", "context_window_exceeded")
    return FailureOutcome("hold", HOST_FAILURE)


def _tokens(usage: Mapping[str, Any], keys: Mapping[str, str]) -> Tokens:
    counts = {part: usage.get(key) for part, key in keys.items()}
    return Tokens(**{part: n if isinstance(n, int) else 0 for part, n in counts.items()})


def tokens_from_usage(breakdown: Mapping[str, Any]) -> Tokens:
    """The parts of a `thread/tokenUsage/updated` breakdown (`total` or `last`,
    camelCase keys) as Tokens (HARV-25); a part it lacks, or that is no
    integer, is 0."""
    return _tokens(breakdown, _USAGE_KEYS)


def tokens_from_rollout(usage: Mapping[str, Any]) -> Tokens:
    """The parts of a rollout token_count's usage (snake_case keys) as Tokens; a
    part it lacks, or that is no integer, is 0."""
    return _tokens(usage, _ROLLOUT_KEYS)


def read_rollout_total(path: Path) -> Tokens | None:
    """The thread's running total: `info.total_token_usage` of the rollout's last
    `event_msg` line of type token_count whose info is not null (HARV-16).

    Returns:
        The total; zero when no such line was written yet; None when the file
        cannot be read (the caller writes tokens_unmeasured). A line that is not
        JSON (one the host is still writing) is passed over.
    """
    try:
        # The lines read_text gives (splitlines breaks at \r\n and \r as at \n),
        # from four syscalls, not nine: a session run reads it in its loop's thread.
        text = read_bytes(path).decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    total = NO_TOKENS
    for line in text.splitlines():
        if "token_count" not in line:
            continue
        usage = _total_usage(line)
        if usage is not None:
            total = tokens_from_rollout(usage)
    return total


def _total_usage(line: str) -> Mapping[str, Any] | None:
    try:
        entry = json.loads(line)
    except ValueError:
        return None
    if not isinstance(entry, dict) or entry.get("type") != "event_msg":
        return None
    payload = entry.get("payload")
    if not isinstance(payload, dict) or payload.get("type") != "token_count":
        return None
    info = payload.get("info")
    usage = info.get("total_token_usage") if isinstance(info, dict) else None
    return usage if isinstance(usage, dict) else None


def turn_tokens(total_now: Tokens, counted_before: Tokens) -> Tokens:
    """What a turn counted: the thread's total now less what its earlier turns
    counted, in every part (HARV-16, HARV-17). A part never goes below 0: a total
    read from another rollout than the one counted before adds nothing rather
    than taking from the run's figure."""
    spent = total_now - counted_before
    return Tokens(**{part: max(0, value) for part, value in spent.model_dump().items()})
