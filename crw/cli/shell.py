"""A word of a command a hint prints, as the user's shell reads it back.

A hint is pasted into a shell, so each value in it (a state directory with a
space, an input with quotes or a newline) is quoted: `shlex.quote` when the value
is printable, else bash's `$'…'` form, which keeps the hint one line (an error is
one line) and gives the shell the value's newline back, not a backslash and an n.
Standard library only.
"""

from __future__ import annotations

import re
import shlex
from os import PathLike

_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_NAMED = {"\n": "\\n", "\t": "\\t", "\r": "\\r", "\\": "\\\\", "'": "\\'"}


def shell_word(value: str | PathLike[str]) -> str:
    """`value` quoted as one word of a bash command line, on one line."""
    text = str(value)
    if not _UNPRINTABLE.search(text):
        return shlex.quote(text)
    return "$'" + "".join(_escape(char) for char in text) + "'"


def _escape(char: str) -> str:
    if char in _NAMED:
        return _NAMED[char]
    if _UNPRINTABLE.match(char):
        return f"\\u{ord(char):04x}" if ord(char) >= 0x80 else f"\\x{ord(char):02x}"
    return char


def shell_join(words: list[str]) -> str:
    """`words` as one bash command line, each quoted as `shell_word` quotes it."""
    return " ".join(shell_word(word) for word in words)
