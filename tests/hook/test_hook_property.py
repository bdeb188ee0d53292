"""The spawn hook over any input (docs/codex.md, "What the hook promises"; no
requirement names it): arbitrary bytes, and arbitrary JSON in a bound owner's
spawn_agent call (deep nesting, lone surrogates, huge integers, NaN and
Infinity, any type in any field), fed to `spawn_command`, the entry point the
hook's process runs. It never raises, exits 0, prints nothing or one JSON object
codex reads (strict: UTF-8, no NaN or Infinity), allows only with the whole input
sent (model and effort overwritten), and writes only warning lines on stderr."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from crw.cli.owner.hook import spawn_command
from tests.hook.spawn_helpers import OWNER, bind, spawn_input

CHAR = st.one_of(
    st.characters(codec=None, exclude_categories=()),
    st.sampled_from(["\ud800", "\udfff", "\ude00", '"', "\\", "\x00", "\n", "é"]),
)
TEXT = st.lists(CHAR, max_size=8).map("".join)
NUMBER = st.integers() | st.floats(allow_nan=True, allow_infinity=True)
JSON = st.recursive(
    st.none() | st.booleans() | NUMBER | TEXT | st.sampled_from(["true", "worker", OWNER]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=8,
)
FIELDS = st.sampled_from(
    ["message", "agent_type", "model", "reasoning_effort", "fork_context", "items", "x"]
)
TOP = st.sampled_from(["tool_input", "session_id", "agent_id", "cwd", "turn_id", "tool_name"])
MESSAGES = st.sampled_from(
    ["crw-flow-op: a.1/t1-a1\nCRW-ROLE: critic\n\nGo.", "CRW-ROLE: executor\n\nGo.", "Go."]
)


def deep(depth: int) -> bytes:
    return b"[" * depth + b"1" + b"]" * depth


@st.composite
def spawn_calls(draw: st.DrawFn) -> bytes:
    """A bound owner's spawn_agent call with fields set to arbitrary JSON, written
    as JSON (NaN and Infinity as Python writes them, a lone surrogate as its
    escape), then perhaps a deep array, a huge integer (json.dumps writes none
    over 4300 digits) or a stray byte put in one value."""
    call: dict[str, Any] = spawn_input(draw(MESSAGES))
    for field in draw(st.lists(FIELDS, max_size=3)):
        call["tool_input"][field] = draw(JSON)
    for field in draw(st.lists(TOP, max_size=1)):
        call[field] = draw(JSON)
    raw = json.dumps(call).encode()
    splices = [deep(50), deep(150), deep(5000), b"9" * 4000, b"9" * 5000, b'"\xff"', b"01"]
    splice = draw(st.sampled_from(splices)) if draw(st.booleans()) else b""
    if splice and b'"minimal"' in raw:
        raw = raw.replace(b'"minimal"', splice, 1)
    return raw


INPUTS = st.one_of(
    spawn_calls(),
    st.binary(max_size=200),
    spawn_calls(),
    st.integers(1, 60_000).map(lambda n: b'{"a":' * n) | st.integers(1, 120_000).map(deep),
)


def strict(text: str) -> Any:
    def refuse(name: str) -> None:
        raise ValueError(name)

    return json.loads(text.encode("utf-8").decode("utf-8"), parse_constant=refuse)


@pytest.fixture(scope="module")
def bound_state(tmp_path_factory: pytest.TempPathFactory) -> Path:
    state = tmp_path_factory.mktemp("state")
    bind(state)
    return state


@settings(max_examples=200, deadline=2000, suppress_health_check=[HealthCheck.too_slow])
@given(raw=INPUTS)
def test_any_input_exits_0_and_prints_nothing_or_strict_json(bound_state: Path, raw: bytes) -> None:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err):
        code = spawn_command(str(bound_state), stdin=io.BytesIO(raw), stdout=out, environ={})
    assert code == 0
    assert all(line.startswith("crw: warning: ") for line in err.getvalue().splitlines())
    if not out.getvalue():
        event("no reply")
        return
    reply = strict(out.getvalue())["hookSpecificOutput"]
    event(f"reply: {reply['permissionDecision']}")
    assert reply["hookEventName"] == "PreToolUse"
    if reply["permissionDecision"] == "allow":
        sent = strict(raw.decode("utf-8"))["tool_input"]
        assert reply["updatedInput"] | {"model": 0, "reasoning_effort": 0} == sent | {
            "model": 0,
            "reasoning_effort": 0,
        }
    else:
        assert reply["permissionDecision"] == "deny"
        assert reply["permissionDecisionReason"].startswith(
            ("leaf_spawn_refused: ", "full_history_fork_refused: ")
        )
