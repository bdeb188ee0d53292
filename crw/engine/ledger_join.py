"""After a restart: the subagent of a published spawn step, by the spawn hook's ledger.

The spawn hook writes a ledger line for each spawn of the owner
(`<state>/flow-bound/decisions/<owner>.jsonl`: run_id, turn_id, tool_use_id,
decision, op). A resumed run joins the lines of the step's op with the owner
turns' `collabAgentToolCall` spawn items (the item's id is the hook's
tool_use_id, its receiverThreadIds the subagent) to find the subagent of a step
published before the restart (HOOK-17); only items whose prompt names the step's
packet are joined (another run on the same owner spawns the same markers), and
the bind then checks each as any other (its parent, its first message, its marker
turn, its pair). What the join cannot tie as it should is
a session_host_warning (WAKE-15):

- no_ledger_line: an owner spawn item whose prompt carries the step's marker has
  no ledger line while the ledger holds lines of the run (its ledger could not be
  written for it); its subagent is taken all the same. A run whose spawns the
  ledger never recorded (no hook installed) is joined by the items alone;
- ledger_op_differs: the ledger line of an owner spawn item names another op
  than the item's prompt carries; the subagent goes by its prompt's marker;
- window_ended: a ledger line of the step's op names an owner turn the host no
  longer shows (the owner's turns it returns end before it): that spawn cannot be
  looked up through the owner;
- several_spawns: the join finds more than one subagent for the step.

Pure: ledger lines and host snapshots in, subagents and warnings out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from crw.engine.bind import PublishedStep
from crw.engine.step_match import carries, marker_of
from crw.host.protocol import CollabAgentToolCall, Turn

SPAWN_TOOL = "spawnAgent"


@dataclass(frozen=True)
class Joined:
    """The subagents the join found for the step, earliest first, and the warnings."""

    subagents: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def join(
    run_id: str, step: PublishedStep, ledger: Iterable[Mapping[str, Any]], turns: Sequence[Turn]
) -> Joined:
    """The owner's subagents spawned for the spawn `step` (its op, its marker, its
    packet), from the run's allowed ledger lines and the owner's `turns`. A spawn
    item whose prompt names another run's packet is that run's, whatever its marker
    and whatever run the ledger line names (the hook records the run the owner's
    line binds, for every spawn of the owner)."""
    op, marker = step.op, step.marker
    lines = [
        line for line in ledger if line.get("run_id") == run_id and line.get("decision") == "allow"
    ]
    by_call = {str(line.get("tool_use_id")): line for line in lines}
    spawns = {item.id: (turn.id, item) for turn in turns for item in _spawn_items(turn)}
    shown = {turn.id for turn in turns}
    warnings: list[str] = []
    subagents: list[str] = []
    for item_id, (_, item) in spawns.items():
        if not carries(item.prompt, step.run, None):
            continue  # another run's spawn, or none of a run
        carried = marker_of(item.prompt)
        line = by_call.get(item_id)
        if (
            line is not None
            and line.get("op") != _op_of(carried)
            and op
            in (
                line.get("op"),
                _op_of(carried),
            )
        ):
            warnings.append("ledger_op_differs")
        if carried != marker or not carries(item.prompt, step.run, step.packet):
            continue
        if line is None and lines:  # the hook records the run's spawns, not this one
            warnings.append("no_ledger_line")
        subagents += [agent for agent in item.receiverThreadIds if agent not in subagents]
    if any(line.get("op") == op and line.get("turn_id") not in shown for line in lines):
        warnings.append("window_ended")
    if len(subagents) > 1:
        warnings.append("several_spawns")
    return Joined(subagents, list(dict.fromkeys(warnings)))


def _spawn_items(turn: Turn) -> list[CollabAgentToolCall]:
    return [
        item
        for item in turn.items
        if isinstance(item, CollabAgentToolCall) and item.tool == SPAWN_TOOL
    ]


def _op_of(marker: str | None) -> str | None:
    """The op of a marker: `<call>/t<k>` of `<call>/t<k>-a<n>`."""
    if marker is None:
        return None
    op, dash, _ = marker.rpartition("-a")
    return op if dash else None
