"""What a person does about a call held because the host refused its spawn.

A dispatch report of a failed spawn (`crw flow dispatched ... --failed`) holds
the call `spawn_failed` with the host's tool output as the held row's error.
`crw flow next` and `crw flow status` show such a call with `fix`: what to
change so the spawn goes through, then the answers the held call takes.
Standard library only: `next` and `status` import it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

SPAWN_FAILED = "spawn_failed"


def held_fix(reason: str | None, answer: Mapping[str, str]) -> str | None:
    """The fix of a call held for `reason`, naming the commands of `answer` (by
    choice, retry first); None for a reason that has no fix of its own."""
    if reason != SPAWN_FAILED:
        return None
    others = ", ".join(command for choice, command in answer.items() if choice != "retry")
    return (
        "the host refused the spawn (the error says why): give the role in roles.toml a "
        "model the host serves (its model/list), or an agent_type it knows (a built-in "
        "one, or an [agents.<type>] table in $CODEX_HOME/config.toml), then "
        f"{answer['retry']} to spawn it again (or {others})"
    )


def with_fix(held: dict[str, Any], error: str | None) -> dict[str, Any]:
    """A held call's entry of `next` and `status` ({call?, reason, answer}), with
    the held row's `error` and the `fix` when its reason has a fix of its own."""
    fix = held_fix(held.get("reason"), held["answer"])
    return held if fix is None else held | {"error": error, "fix": fix}
