"""What the spawn hook reads: the PreToolUse input on its stdin, as bytes, read
strictly (host-protocol.md, Hooks).

Codex runs the hook before every tool call and reads an exit 2 as a refusal, so
an input the hook cannot read is never an error: it is a warning, and the tool
call goes ahead undecided. Read here is only what the hook can decide and echo
back as valid JSON: at most `INPUT_LIMIT` bytes of UTF-8, strict JSON (no NaN,
no Infinity, no number out of a double's range, no integer over `MAX_DIGITS`
digits), an object; and for a `spawn_agent` call, a `tool_input` that is an
object, nested at most `MAX_DEPTH` levels, with no lone surrogate in any string.

Standard library only: a hook runs on every tool call of the thread.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

INPUT_LIMIT = 4 * 1024 * 1024
"""The most bytes of stdin the hook reads (4 MiB); a larger input is left alone."""
MAX_DEPTH = 100
"""The deepest a spawn_agent call's input may nest (objects and arrays)."""
MAX_DIGITS = 4300
"""The most digits of an integer (Python's own limit for reading one)."""
SPAWN_TOOL = "spawn_agent"
V2_SPAWN_TOOL = "collaborationspawn_agent"
"""multi-agent v2's spawn as codex names it to the hook: namespace and name glued
(docs/host.md, "Multi-agent v2")."""
SPAWN_TOOLS = frozenset({SPAWN_TOOL, V2_SPAWN_TOOL})


def is_spawn_tool(tool_name: object) -> bool:
    """Whether a hook input's `tool_name` (any JSON value) is a spawn, v1's or v2's."""
    return isinstance(tool_name, str) and tool_name in SPAWN_TOOLS


_UNDECIDED = "the tool call goes ahead undecided"
_SURROGATE = re.compile("[\ud800-\udfff]")


@dataclass(frozen=True)
class HookInput:
    """A spawn_agent call to decide (None: nothing to decide), and the warning of
    an input that could not be read (None: none)."""

    call: dict[str, Any] | None
    warning: str | None = None


def read_hook_input(raw: bytes) -> HookInput:
    """The spawn_agent call in `raw`, the hook's stdin; never raises."""
    if len(raw) > INPUT_LIMIT:
        return HookInput(None, f"the hook's input is over {INPUT_LIMIT} bytes; {_UNDECIDED}")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        return HookInput(None, f"the hook's input is not UTF-8 (byte {err.start}); {_UNDECIDED}")
    try:
        value = json.loads(text, parse_constant=_no_constant, parse_float=_float, parse_int=_int)
    except RecursionError:
        return HookInput(None, f"the hook's input is nested too deep to read; {_UNDECIDED}")
    except ValueError as err:  # json.JSONDecodeError, or a number refused above
        return HookInput(None, f"the hook's input is not JSON ({err}); {_UNDECIDED}")
    if not isinstance(value, dict):
        return HookInput(None, f"the hook's input is not a JSON object; {_UNDECIDED}")
    if not is_spawn_tool(value.get("tool_name")):
        return HookInput(None)
    sent = value.get("tool_input")
    if not isinstance(sent, dict):
        kind = type(sent).__name__ if sent is not None else "null"
        return HookInput(
            None, f"the spawn_agent call's tool_input is {kind}, not an object; {_UNDECIDED}"
        )
    unreadable = _unreadable(value)
    if unreadable is not None:
        return HookInput(None, f"the spawn_agent call's input {unreadable}; {_UNDECIDED}")
    return HookInput(value)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is no JSON number")


def _float(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        raise ValueError(f"the number {text[:20]} is out of range")
    return number


def _int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_DIGITS:
        raise ValueError(f"an integer of {len(text.lstrip('-'))} digits is over {MAX_DIGITS}")
    return int(text)


def _unreadable(value: object) -> str | None:
    """Why `value` cannot be echoed back as JSON codex reads (None: it can): nested
    deeper than MAX_DEPTH, or a string (or key) holding a lone surrogate. Walked
    without recursion, so no depth makes it raise."""
    stack: list[tuple[object, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            if _SURROGATE.search(item):
                return "holds a lone surrogate (\\ud800-\\udfff), which is no Unicode text"
        elif isinstance(item, dict | list):
            if depth >= MAX_DEPTH:
                return f"is nested deeper than {MAX_DEPTH} levels"
            if isinstance(item, dict):
                stack.extend((key, depth) for key in item)
                stack.extend((one, depth + 1) for one in item.values())
            else:
                stack.extend((one, depth + 1) for one in item)
    return None
