"""How every command prints: a human form, or with --json one JSON object."""

from __future__ import annotations

import json as json_module
from collections.abc import Callable
from typing import Any


def emit(as_json: bool, payload: dict[str, Any], human: str | Callable[[], str]) -> None:
    """Print `payload` as one JSON object line, or `human` as it is (a function that
    makes it is called only then: a run of many calls is not summarised for --json).
    A payload is a tree the command just built, never a cycle: the encoder does not
    look for one (a big run's `status --json` is 10,000 calls' objects)."""
    if as_json:
        print(json_module.dumps(payload, ensure_ascii=False, check_circular=False))
    else:
        print(human if isinstance(human, str) else human())


def format_tokens(tokens: dict[str, int]) -> str:
    """`1234 (in 1000, cached 200, out 234, reasoning 50)`; `0` for none."""
    if not tokens.get("total"):
        return "0"
    return (
        f"{tokens['total']} (in {tokens['input']}, cached {tokens['cached_input']}, "
        f"out {tokens['output']}, reasoning {tokens['reasoning_output']})"
    )
