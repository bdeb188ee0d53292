"""How every command prints: a human form, or with --json one JSON object.

Any text a run's journal holds reaches the output as it is written: a person's
form through `say`, which escapes what a terminal would obey instead of show
(`terminal_text`: control characters but newline and tab, bidi
controls, a lone surrogate); JSON through `json_text`, which a strict reader reads
whatever the text (a lone surrogate as its `\\uXXXX` escape) and whatever the
locale (all ASCII when stdout is not UTF-8). `crw.cli.entry.run_command` makes
stdout show what its encoding cannot hold as an escape, never raise.

An error is one line, `what; how to fix it`: `crw: error: LINE` on stderr for a
person, and with --json `{"error": what, "fix": how}` on stdout (`say_error`),
whatever the command. Standard library only (and `crw.text`).
"""

from __future__ import annotations

import json as json_module
import re
import sys
from collections.abc import Callable, Sequence
from typing import Any, TextIO

from crw.text import escape_surrogates

_OBEYED = "\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff"
"""What a terminal obeys rather than shows, beyond C0: DEL and C1 (CSI among them),
the bidi embeddings, overrides and isolates (they reorder the text around them);
and a lone surrogate, which no output encoding holds."""
_CONTROL = re.compile(f"[\x00-\x1f{_OBEYED}]")
_TERMINAL = re.compile(f"[\x00-\x08\x0b-\x1f{_OBEYED}]")


def _escaped(found: re.Match[str]) -> str:
    return found.group().encode("unicode_escape").decode()


def one_line(text: str) -> str:
    """`text` with each control character, bidi control and lone surrogate escaped
    (`\\n`, `\\u202e`, `\\ud800`), so an error stays one line, shown as written."""
    return _CONTROL.sub(_escaped, text)


def terminal_text(text: str) -> str:
    """`text` as `one_line` escapes it, its newlines and tabs kept: what every
    command prints for a person."""
    return _TERMINAL.sub(_escaped, text)


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


def wants_json(argv: Sequence[str]) -> bool:
    """Whether the command line asks for JSON: `--json` among its options (before a
    `--`, after which every token is a value)."""
    for token in argv:
        if token == "--":
            return False
        if token == "--json":
            return True
    return False


def error_parts(line: str) -> tuple[str, str | None]:
    """An error's line split into what went wrong and how to fix it, at its last
    `; ` (every error of crw reads `what, where; what to do`) outside a quoted word
    of a command it names (`--input 'note=x; y'`); no fix when the line names none."""
    cut = -1
    at = 0
    while at < len(line):
        if line.startswith("; ", at):
            cut = at
        end = _quoted_word_end(line, at) if at == 0 or line[at - 1] == " " else None
        at = end if end is not None else at + 1
    what, fix = line[: max(cut, 0)], line[cut + 2 :]
    return (what, fix) if cut > 0 and fix else (line, None)


def _quoted_word_end(line: str, at: int) -> int | None:
    """Where the shell word that opens with a quote at `at` ends (`'…'`, `$'…'` or
    `"…"`, and what follows it up to a space or `; `), as `crw.cli.shell` quotes a value;
    None when no quote opens there or it is never closed (an apostrophe of prose)."""
    if not line.startswith(("'", "$'", '"'), at):
        return None
    while at < len(line) and line[at] != " " and not line.startswith("; ", at):
        if line.startswith("$'", at):
            close = _closing(line, at + 2, "'", escapes=True)
        elif line[at] in "'\"":
            close = _closing(line, at + 1, line[at], escapes=line[at] == '"')
        else:
            close = at
        if close is None:
            return None
        at = close + 1
    return at


def _closing(line: str, at: int, quote: str, *, escapes: bool) -> int | None:
    while at < len(line):
        if escapes and line[at] == "\\":
            at += 2
            continue
        if line[at] == quote:
            return at
        at += 1
    return None


def say_error(line: str, *, as_json: bool, members: dict[str, Any] | None = None) -> None:
    """Print an error: `{"error": ..., "fix": ..., **members}` on stdout with
    --json, else `crw: error: LINE` on stderr."""
    if as_json:
        what, fix = error_parts(line)
        say_json({"error": what, "fix": fix} | (members or {}))
    else:
        print(f"crw: error: {one_line(line)}", file=sys.stderr, flush=True)


def format_tokens(tokens: dict[str, int]) -> str:
    """`1234 (in 1000, cached 200, out 234, reasoning 50)`; `0` for none."""
    if not tokens.get("total"):
        return "0"
    return (
        f"{tokens['total']} (in {tokens['input']}, cached {tokens['cached_input']}, "
        f"out {tokens['output']}, reasoning {tokens['reasoning_output']})"
    )
