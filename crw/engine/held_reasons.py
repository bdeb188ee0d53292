"""The reasons a call is held by an interrupt, and whether a hold was a pause's.

Apart from the interrupt decisions (`crw.engine.holds.interrupt`, which re-exports them)
so that what only names them, the review rules and the run control, does not
import those decisions, the bind's rules and the host's protocol with them: a run
process needs none of these before its started row.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

PAUSED = "paused"
CANCELLED = "cancelled"
DEADLINE = "deadline"
"""The held reasons of an interrupted call: `crw flow pause`, `crw flow cancel`,
and the node's `timeout` run out."""


def paused_why(why: str | None) -> str:
    """What follows "paused" in a line a user reads: `by crw flow pause` for the pause
    the user asked for (its reason, `paused`, would only repeat the state), else
    `(why)`: `(host_unavailable: …)`."""
    return "by crw flow pause" if why in (None, "", PAUSED) else f"({why})"


def held_by_pause(ended: Mapping[str, Any] | None) -> bool:
    """A call's terminal row is a pause's hold: the resumed run goes on with the
    call in place, as with a decision to retry (ATT-30)."""
    return ended is not None and ended.get("row") == "held" and ended.get("reason") == PAUSED
