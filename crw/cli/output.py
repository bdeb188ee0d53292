"""How every command prints: a human form, or with --json one JSON object.

Any text a run's journal holds reaches the output as it is written: a person's
form through `say`, which escapes what a terminal would obey instead of show
(`crw.cli.entry.terminal_text`: control characters but newline and tab, bidi
controls, a lone surrogate); JSON through `json_text`, which a strict reader reads
whatever the text (a lone surrogate as its `\\uXXXX` escape) and whatever the
locale (all ASCII when stdout is not UTF-8). `crw.cli.entry.run_command` makes
stdout show what its encoding cannot hold as an escape, never raise.
"""

from __future__ import annotations

import json as json_module
import sys
from collections.abc import Callable, Sequence
from typing import Any, TextIO

from crw.cli.entry import terminal_text
from crw.text import escape_surrogates


def emit(as_json: bool, payload: dict[str, Any], human: str | Callable[[], str]) -> None:
    """Print `payload` as one JSON object line, or `human` as it is (a function that
    makes it is called only then: a run of many calls is not summarised for --json)."""
    if as_json:
        say_json(payload)
    else:
        say(human if isinstance(human, str) else human())


def say(text: str, *, file: TextIO | None = None) -> None:
    """Print `text` for a person, on stdout (or `file`), flushed for a reader at the
    other end of a pipe."""
    print(terminal_text(text), file=file or sys.stdout, flush=True)


def say_json(value: Any) -> None:
    """Print `value` as one line of JSON, flushed."""
    print(json_text(value), flush=True)


def say_json_lines(values: Sequence[Any]) -> None:
    """Print each of `values` as its line of JSON (JSON Lines), flushed once."""
    print("\n".join(map(json_text, values)), flush=True)


def json_text(value: Any) -> str:
    """`value` as one line of JSON for stdout: UTF-8 text when stdout is UTF-8, else
    all ASCII. A value is a tree the command just built, never a cycle: the encoder
    does not look for one (a big run's `status --json` is 10,000 calls' objects)."""
    encoding = (getattr(sys.stdout, "encoding", None) or "").lower().replace("-", "")
    if encoding not in ("utf8", "utf_8"):
        return json_module.dumps(value, check_circular=False)
    return escape_surrogates(json_module.dumps(value, ensure_ascii=False, check_circular=False))


def format_tokens(tokens: dict[str, int]) -> str:
    """`1234 (in 1000, cached 200, out 234, reasoning 50)`; `0` for none."""
    if not tokens.get("total"):
        return "0"
    return (
        f"{tokens['total']} (in {tokens['input']}, cached {tokens['cached_input']}, "
        f"out {tokens['output']}, reasoning {tokens['reasoning_output']})"
    )
