"""How every command prints: a human form, or with --json one JSON object."""

from __future__ import annotations

import json as json_module
from typing import Any


def emit(as_json: bool, payload: dict[str, Any], human: str) -> None:
    """Print `payload` as one JSON object line, or `human` as it is."""
    print(json_module.dumps(payload, ensure_ascii=False) if as_json else human)


def format_tokens(tokens: dict[str, int]) -> str:
    """`1234 (in 1000, cached 200, out 234, reasoning 50)`; `0` for none."""
    if not tokens.get("total"):
        return "0"
    return (
        f"{tokens['total']} (in {tokens['input']}, cached {tokens['cached_input']}, "
        f"out {tokens['output']}, reasoning {tokens['reasoning_output']})"
    )
