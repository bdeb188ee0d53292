"""The steps a resumed session run finds published and bound to no subagent.

Their files are not synced (`crw.bus.steps`): a power loss may leave a step file
whole beside a packet it took or tore. Before a resumed process records its
started row (after which the owner's `next` hands its steps out), the step file of
each such step whose packet is not whole is retracted; the call then writes both
again from its row (ATT-21), or binds what the owner took before the loss.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from crw.journal.replay import CallState

Row = Mapping[str, Any]


def unbound_spawns(calls: Mapping[str, CallState], rows: Sequence[Row]) -> list[Row]:
    """The newest step_published row of each call that waits on it (no subagent
    bound: `waiting_session`), when it is a spawn with a packet, by call. The rows
    are read from the newest back, until each waiting call's is found."""
    waiting = {name for name, call in calls.items() if call.state == "waiting_session"}
    found: dict[str, Row] = {}
    for row in reversed(rows):
        if len(found) == len(waiting):
            break
        call = row.get("call")
        if call in waiting and call not in found and row.get("row") == "step_published":
            found[call] = row
    return [
        found[call]
        for call in sorted(found)
        if found[call].get("action") == "spawn" and found[call].get("packet_digest")
    ]
