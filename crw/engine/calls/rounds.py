"""The calls of a node's review round, as both backends run them.

Pure: the node, the round's decision (`crw.engine.calls.review.RunCall`), the terminal
rows of the node's calls and the journal in; the call to run out. A review call
is the node with the review role, the reviewer's task and the verdict schema; a
fix call is the node with the fix's task, which carries the journal's record of
the handle's turns (`crw.engine.calls.conversation`), and no review of its own. The
session backend runs them as session calls (`crw.actors.review_rounds`), the App
Server backend as App Server calls (`crw.actors.app_server_rounds`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from crw.engine.calls import conversation, review
from crw.engine.calls.gate import call_id
from crw.engine.config.workflow_nodes import Node

Row = Mapping[str, Any]


def review_node(
    node: Node,
    task: str,
    action: review.RunCall,
    ends: Sequence[Row],
    workspace: str,
    first: int = 1,
) -> Node:
    """The review call's node: the review role judges the subject's answer, the
    work read in the node's `workspace`. `first`: the ordinal the node's calls
    start at (a restarted node's start again after the call it gave up on)."""
    assert node.review is not None and action.subject is not None
    subject = call_id(node.id, first - 1 + action.subject)
    answer = ends[action.subject - 1].get("result")
    text = review.reviewer_task(node.id, subject, task, answer, workspace)
    update = {"role": node.review.role, "task": escaped(text), "qa": None}  # a checkout's P
    return node.model_copy(update=update | {"output_schema": review.VERDICT_SCHEMA})


@dataclass(frozen=True)
class Fix:
    """A fix call: its node, the call it continues and that call's record."""

    node: Node
    handle: str
    turns: list[conversation.Turn]
    """The journal's record of the handle's turns (ATT-40, ATT-41)."""
    answer: Any
    """The handle's answer: the content of the answer file its packet names."""


def fix_node(
    node: Node,
    task: str,
    action: review.RunCall,
    ends: Sequence[Row],
    journal: Sequence[Row],
    answer_file: str,
    first: int = 1,
) -> Fix:
    """The fix call's node, continuing the handle's conversation: its task is the
    record of the handle's turns, the packet it continues, the answer file, the
    review's findings and the node's task again (built from the journal alone).
    `first`: as for `review_node`."""
    handle = call_id(node.id, first - 1 + (action.handle or 1))
    turns = conversation.record(handle, journal)
    packet = conversation.continued_packet(handle, journal) or continued_input(handle, turns)
    section = conversation.section(handle, turns, packet, answer_file)
    reviewer = call_id(node.id, first - 2 + action.ordinal)
    text = review.fix_task(task, reviewer, action.findings, section)
    fix = node.model_copy(update={"task": escaped(text), "review": None})
    answer = ends[(action.handle or 1) - 1].get("result")
    return Fix(node=fix, handle=handle, turns=turns, answer=answer)


def continued_input(handle: str, turns: Sequence[conversation.Turn]) -> str | None:
    """Where the record names the continued call's packet when the call wrote no
    packet file (an App Server call: its task turn's input is its packet)."""
    first = next((turn for turn in turns if turn.call == handle), None)
    return None if first is None else f"the input of {handle} turn {first.place} above"


def forked(rows: Sequence[Row]) -> bool:
    """Whether a fix call's thread is a fork of its handle's: it bound a thread
    and took no checkpoint branch (ATT-39)."""
    kinds = {row.get("row") for row in rows}
    return "thread_started" in kinds and "checkpoint_started" not in kinds


def escaped(text: str) -> str:
    """`text` as a task template that renders to itself."""
    return text.replace("{", "{{").replace("}", "}}")
