"""Text that is not valid Unicode: a lone surrogate, which a JSON string can carry
as an escape (`"\\ud800"`) but UTF-8 cannot hold.

Two policies, one for each way text leaves crw: JSON that crw keeps (the journal,
a digest's canonical JSON) writes it as its `\\uXXXX` escape, so it reads back as
it was; text for a subagent or the host, which take only Unicode, carries U+FFFD
in its place.
"""

from __future__ import annotations

import json
import re
import sys
from typing import Any

_SURROGATE = re.compile("[\ud800-\udfff]")


def json_loads(text: str | bytes | bytearray) -> Any:
    """`json.loads(text)`, with pydantic-core's parser when the process has loaded
    it (the run process and every command that writes rows do: they encode with
    it), which takes about half the time and reads the same values; what it
    refuses (the escape of a lone surrogate, nesting over 200 deep, text that is
    not JSON) `json` reads, or raises for, as it always did. A process that has
    not loaded it does not load it to read: its import costs more than it saves
    on a few rows or messages."""
    core = sys.modules.get("pydantic_core")
    if core is not None:
        try:
            return core.from_json(text, cache_strings="keys")
        except ValueError:
            pass
    return json.loads(text)


def escape_surrogates(json_text: str) -> str:
    """JSON text with each surrogate written as its `\\uXXXX` escape, so that it
    encodes as UTF-8. Outside its strings JSON is ASCII, so every surrogate is
    inside a string, where the escape reads back as the same code unit."""
    return _SURROGATE.sub(_escape, json_text) if _has_surrogate(json_text) else json_text


def replace_surrogates(text: str) -> str:
    """`text` with each surrogate replaced by U+FFFD."""
    return _SURROGATE.sub("\ufffd", text) if _has_surrogate(text) else text


def _has_surrogate(text: str) -> bool:
    """Whether `text` holds a surrogate: the one code point UTF-8 cannot encode.
    Two scans in C (ASCII, then UTF-8) before the pattern's walk, which takes ~40 us
    on a 3 kB message (0.2 us for these): every row and message crw writes passes
    here, and almost none holds one."""
    if text.isascii():
        return False
    try:
        text.encode()
    except UnicodeEncodeError:
        return True
    return False


def _escape(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"
