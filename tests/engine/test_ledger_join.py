"""The join of the spawn hook's ledger with the owner's turns, over plain data."""

from __future__ import annotations

from typing import Any

from crw.engine.steps.bind import PublishedStep
from crw.engine.steps.ledger_join import Joined, join
from crw.engine.steps.packet import spawn_message
from crw.host.protocol import Turn

RUN = "run-1"
OP = "build.1/t1"
MARKER = f"{OP}-a1"
P = "/work/calls/build.1"


def packet(marker: str, run: str = RUN) -> str:
    call, _, turn = marker.partition("/")
    return f"/state/flow/{run}/steps/{call}/packet-{turn}.md"


STEP = PublishedStep(
    call="build.1",
    k=1,
    attempt=1,
    op=OP,
    marker=MARKER,
    role="executor",
    action="spawn",
    agent_id=None,
    workspace=P,
    run=RUN,
    packet=packet(MARKER),
)


def turn(turn_id: str, *items: tuple[str, str | None, list[str]]) -> Turn:
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


def spawn(item_id: str, marker: str, agent: str, run: str = RUN) -> tuple[str, str, list[str]]:
    """An owner's spawn item of `marker`'s step of `run`, with the step's message."""
    call, _, rest = marker.partition("/")
    k, _, attempt = rest.removeprefix("t").partition("-a")
    message = spawn_message(call, int(k), int(attempt), "executor", P, packet(marker, run))
    return item_id, message, [agent]


def test_the_ledger_line_and_the_owners_item_name_the_subagent() -> None:
    """spec: HOOK-17"""
    turns = [turn("u1", spawn("c1", "explore.1/t1-a1", "a0"), spawn("c2", MARKER, "a1"))]
    ledger = [line("u1", "c1", "explore.1/t1"), line("u1", "c2")]
    assert join(RUN, STEP, ledger, turns) == Joined(["a1"], [])
    other_run = [line("u1", "c2", run_id="run-2")]
    assert join(RUN, STEP, other_run, turns) == Joined([], [])  # no hook at work: the lookup's


def test_a_spawn_item_without_a_prompt_is_joined_by_its_ledger_lines_op() -> None:
    """spec: HOOK-17: the ledger line ties the owner's item to the step; without a
    line, or with a line of another op, an item with no prompt is not joined."""
    bare = [turn("u1", ("c1", None, ["a0"]), ("c2", "", ["a1"]))]
    ledger = [line("u1", "c1", "explore.1/t1"), line("u1", "c2")]
    assert join(RUN, STEP, ledger, bare) == Joined(["a1"], [])
    assert join(RUN, STEP, ledger[:1], bare) == Joined([], [])
    assert join(RUN, STEP, [], bare) == Joined([], [])


def test_each_warning_of_the_join() -> None:
    """spec: WAKE-15, ROWS-14: no_ledger_line, ledger_op_differs, window_ended,
    several_spawns."""
    one = [turn("u1", spawn("c2", MARKER, "a1"))]
    others = [line("u1", "c1", "explore.1/t1")]
    assert join(RUN, STEP, others, one) == Joined([], ["no_ledger_line"])  # the lookup's
    differs = [line("u1", "c2", op="build.1/t9")]
    assert join(RUN, STEP, differs, one) == Joined(["a1"], ["ledger_op_differs"])
    gone = [line("u1", "c2"), line("u0", "c0")]
    assert join(RUN, STEP, gone, one) == Joined(["a1"], ["window_ended"])
    twice = [turn("u1", spawn("c2", MARKER, "a1")), turn("u2", spawn("c3", MARKER, "a2"))]
    ledger = [line("u1", "c2"), line("u2", "c3")]
    assert join(RUN, STEP, ledger, twice) == Joined(["a1", "a2"], ["several_spawns"])


def test_another_runs_spawn_of_the_same_marker_is_not_joined() -> None:
    """spec: HOOK-17, DISP-25: two runs on one owner publish the same markers, and
    the hook's line names the run the owner's line binds for the spawns of both: the
    join goes by the packet the spawn's prompt names."""
    theirs = spawn("c1", MARKER, "theirs", run="run-2")
    turns = [turn("u1", theirs, spawn("c2", MARKER, "ours"))]
    ledger = [line("u1", "c1"), line("u1", "c2")]
    assert join(RUN, STEP, ledger, turns) == Joined(["ours"], [])
    assert join(RUN, STEP, [line("u1", "c1")], [turn("u1", theirs)]) == Joined([], [])
    marker_only = ("c3", f"crw-flow-op: {MARKER}\nCRW-ROLE: executor\n", ["bare"])
    assert join(RUN, STEP, [], [turn("u1", marker_only)]) == Joined([], [])
