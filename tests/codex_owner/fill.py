"""How an owner fills the placeholders of a command crw spells out (a step's `then`
and `on_failure`), as docs/session.md says, knowing nothing of crw's commands:

- `'<name>'`, a placeholder inside single quotes, takes the value inside those
  quotes, each `'` of it written `'\\''` (so backticks, `$`, `"` and newlines are
  the value's own characters: the shell expands nothing in single quotes);
- `<name>` alone takes the value as one shell word (`shlex.quote`: an id such
  as a thread's is itself).

`tool_output` is the host tool's whole output; any other name is the member of
that name of the output when it is a JSON object (`<agent_id>` of spawn_agent's
`{"agent_id": …}`).
"""

from __future__ import annotations

import json
import re
import shlex
from typing import Any

PLACEHOLDER = re.compile(r"'<([a-z_]+)>'|<([a-z_]+)>")


def values_of(output: str) -> dict[str, str]:
    """What a tool's output can fill: `tool_output`, and each string member of it
    when it is a JSON object."""
    values = {"tool_output": output}
    try:
        parsed: Any = json.loads(output)
    except json.JSONDecodeError:
        return values
    if isinstance(parsed, dict):
        values |= {k: v for k, v in parsed.items() if isinstance(v, str) and k != "tool_output"}
    return values


def placeholders(command: str) -> set[str]:
    """The names of the command's placeholders."""
    return {quoted or bare for quoted, bare in PLACEHOLDER.findall(command)}


def fill(command: str, values: dict[str, str]) -> str | None:
    """The command with every placeholder filled from `values`, or None when one
    of them has no value (the command is not this output's)."""
    if not placeholders(command) <= set(values):
        return None

    def one(match: re.Match[str]) -> str:
        quoted, bare = match.groups()
        if quoted:
            return "'" + values[quoted].replace("'", "'\\''") + "'"
        return shlex.quote(values[bare])

    return PLACEHOLDER.sub(one, command)
