"""The join of the spawn hook's ledger with the owner's turns, over plain data."""

from __future__ import annotations

from typing import Any

from crw.engine.ledger_join import Joined, join
from crw.host.protocol import Turn

RUN = "run-1"
OP = "build.1/t1"
MARKER = f"{OP}-a1"


def turn(turn_id: str, *items: tuple[str, str, list[str]]) -> Turn:
    """An owner turn with spawnAgent items (id, prompt, receivers)."""
    return Turn.model_validate(
        {
            "id": turn_id,
            "status": "completed",
            "items": [
                {
                    "type": "collabAgentToolCall",
                    "id": item_id,
                    "tool": "spawnAgent",
                    "status": "completed",
                    "prompt": prompt,
                    "receiverThreadIds": receivers,
                }
                for item_id, prompt, receivers in items
            ],
        }
    )


def line(turn_id: str, tool_use_id: str, op: str = OP, **fields: Any) -> dict[str, Any]:
    base = {"run_id": RUN, "turn_id": turn_id, "tool_use_id": tool_use_id, "decision": "allow"}
    return base | {"op": op} | fields


def spawn(item_id: str, marker: str, agent: str) -> tuple[str, str, list[str]]:
    return item_id, f"crw-flow-op: {marker}\nCRW-ROLE: executor\n", [agent]


def test_the_ledger_line_and_the_owners_item_name_the_subagent() -> None:
    """spec: HOOK-17"""
    turns = [turn("u1", spawn("c1", "explore.1/t1-a1", "a0"), spawn("c2", MARKER, "a1"))]
    ledger = [line("u1", "c1", "explore.1/t1"), line("u1", "c2")]
    assert join(RUN, OP, MARKER, ledger, turns) == Joined(["a1"], [])
    other_run = [line("u1", "c2", run_id="run-2")]
    assert join(RUN, OP, MARKER, other_run, turns) == Joined(["a1"], [])  # no hook at work


def test_each_warning_of_the_join() -> None:
    """spec: WAKE-15, ROWS-14: no_ledger_line, ledger_op_differs, window_ended,
    several_spawns."""
    one = [turn("u1", spawn("c2", MARKER, "a1"))]
    others = [line("u1", "c1", "explore.1/t1")]
    assert join(RUN, OP, MARKER, others, one) == Joined(["a1"], ["no_ledger_line"])
    differs = [line("u1", "c2", op="build.1/t9")]
    assert join(RUN, OP, MARKER, differs, one) == Joined(["a1"], ["ledger_op_differs"])
    gone = [line("u1", "c2"), line("u0", "c0")]
    assert join(RUN, OP, MARKER, gone, one) == Joined(["a1"], ["window_ended"])
    twice = [turn("u1", spawn("c2", MARKER, "a1")), turn("u2", spawn("c3", MARKER, "a2"))]
    ledger = [line("u1", "c2"), line("u2", "c3")]
    assert join(RUN, OP, MARKER, ledger, twice) == Joined(["a1", "a2"], ["several_spawns"])
