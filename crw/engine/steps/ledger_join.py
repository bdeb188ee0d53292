"""After a restart: the subagent of a published spawn step, by the spawn hook's ledger.

The spawn hook writes a ledger line for each spawn of the owner
(`<state>/flow-bound/decisions/<owner>.jsonl`: run_id, turn_id, tool_use_id,
decision, op). A resumed run joins the lines of the step's op with the owner
turns' `collabAgentToolCall` spawn items (the item's id is the hook's
tool_use_id, its receiverThreadIds the subagent) to find the subagent of a step
published before the restart (HOOK-17). The ledger line is what ties an item to
the step: an item no line names is not joined (the marker lookup that follows
the join finds its subagent by its first message). An item that carries a
prompt is joined only when the prompt names the step's packet of this run
(another run on the same owner spawns the same markers, and the hook records
the run the owner's line binds for both runs' spawns); an item without one (none,
or empty) goes by its line's op. The bind then checks each subagent as any other (its parent,
its first message, its marker turn, its pair). What the join cannot tie as it
should is a session_host_warning (WAKE-15):

- no_ledger_line: an owner spawn item whose prompt carries the step's marker has
  no ledger line while the ledger holds lines of the run (its ledger could not be
  written for it); its subagent is left to the marker lookup. A run whose spawns
  the ledger never recorded (no hook installed) gets no warning;
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

from crw.engine.steps.bind import PublishedStep
from crw.engine.steps.step_match import carries, marker_of
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
    packet): each of the run's allowed ledger lines, through its tool_use_id, to
    the spawn item of the owner's `turns` with that id. An item whose prompt names
    another run's packet is that run's, whatever its marker and whatever run the
    ledger line names (the hook records the run the owner's line binds, for every
    spawn of the owner)."""
    lines = [
        line for line in ledger if line.get("run_id") == run_id and line.get("decision") == "allow"
    ]
    by_call = {str(line.get("tool_use_id")): line for line in lines}
    spawns = [item for turn in turns for item in _spawn_items(turn)]
    warnings: list[str] = []
    subagents: list[str] = []
    for item in spawns:
        line = by_call.get(item.id)
        if item.prompt and not carries(item.prompt, step.run, None):
            continue  # another run's spawn, or none of a run
        if item.prompt and _op_differs(step, line, marker_of(item.prompt)):
            warnings.append("ledger_op_differs")
        if not _is_steps(step, item, line):
            continue
        if line is None:  # the hook records the run's spawns, not this one
            warnings += ["no_ledger_line"] if lines else []
            continue
        subagents += [agent for agent in item.receiverThreadIds if agent not in subagents]
    shown = {turn.id for turn in turns}
    if any(line.get("op") == step.op and line.get("turn_id") not in shown for line in lines):
        warnings.append("window_ended")
    if len(subagents) > 1:
        warnings.append("several_spawns")
    return Joined(subagents, list(dict.fromkeys(warnings)))


def _is_steps(
    step: PublishedStep, item: CollabAgentToolCall, line: Mapping[str, Any] | None
) -> bool:
    """Whether the spawn `item` is of `step`: its prompt names the step's marker and
    packet, or, with no prompt (none, or empty), its ledger `line` names the step's op."""
    if not item.prompt:
        return line is not None and line.get("op") == step.op
    return marker_of(item.prompt) == step.marker and carries(item.prompt, step.run, step.packet)


def _op_differs(step: PublishedStep, line: Mapping[str, Any] | None, carried: str | None) -> bool:
    """The item's ledger `line` names another op than its prompt's marker `carried`,
    one of the two being the step's."""
    if line is None:
        return False
    return line.get("op") != _op_of(carried) and step.op in (line.get("op"), _op_of(carried))


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
