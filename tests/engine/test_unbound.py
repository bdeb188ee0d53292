"""The steps a resumed session run finds published and bound to no subagent
(crw.engine.steps.unbound; spec: ATT-21, STEP-21)."""

from __future__ import annotations

from typing import Any

from crw.engine.steps.unbound import unbound_spawns
from crw.journal.replay import replay


def published(call: str, k: int, action: str = "spawn", **extra: Any) -> dict[str, Any]:
    marker = f"{call}/t{k}-a1"
    row = {"row": "step_published", "call": call, "k": k, "attempt": 1, "marker": marker}
    row |= {"op": f"{call}/t{k}", "action": action}
    return row | ({"packet": f"/p/{marker}", "packet_digest": "sha256:x"} | extra)


def prepared(call: str) -> dict[str, Any]:
    return {"row": "prepared", "call": call, "node": call.split(".")[0], "backend": "session"}


def bound(call: str, k: int) -> list[dict[str, Any]]:
    return [
        {"row": "thread_started", "call": call, "thread_id": f"t-{call}", "attempt": 1},
        {"row": "turn_started", "call": call, "k": k, "turn_id": f"u-{call}", "attempt": 1},
    ]


def test_the_newest_spawn_of_each_call_no_subagent_was_bound_to() -> None:
    """spec: ATT-21: a call bound, or waiting on a send_input (no packet), has none;
    a call that waits on its newest spawn step has that step."""
    rows = [
        prepared("a.1"),
        published("a.1", 1),
        *bound("a.1", 1),
        prepared("b.1"),
        published("b.1", 1),
        *bound("b.1", 1),
        published("b.1", 2, action="send_input", packet=None, packet_digest=None),
        prepared("c.1"),
        published("c.1", 1),
        *bound("c.1", 1),
        published("c.1", 2),  # its repair on a new subagent: a spawn
        prepared("d.1"),
        published("d.1", 1),
    ]
    state = replay(rows)
    assert [r["marker"] for r in unbound_spawns(state.calls, rows)] == ["c.1/t2-a1", "d.1/t1-a1"]


def test_a_run_with_no_call_waiting_has_none() -> None:
    rows = [prepared("a.1"), published("a.1", 1), *bound("a.1", 1)]
    assert unbound_spawns(replay(rows).calls, rows) == []
