"""A node's review rounds: `review = { role, rounds }`, as pure decisions.

A reviewed node's calls run in order, each `<node>.<n>`:

    <node>.1      the node's call (its role, task and schema)
    <node>.2      the review: the review role judges the answer of <node>.1
    <node>.3      on a rejection, the fix: a continuation of <node>.1
                  (resume: <node>.1) on a new subagent, told the findings
    <node>.4      the review of <node>.3's answer
    ...           up to `rounds` fixes

The reviewer answers `VERDICT_SCHEMA`: `{"verdict": "accept", "findings": []}` or
`{"verdict": "reject", "findings": ["..."]}`. An acceptance makes the answer it
judged the node's result. A rejection after `rounds` fixes ends that review call
held, reason `review_rejected` (the held row keeps the reviewer's result); the run
waits for a decision. A call of the chain that ends otherwise (held, null_model)
ends the node so. Every decision is read from the calls' terminal rows, so a
resumed process goes on from the last row.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from crw.engine.config._tomlsource import TomlSource, one_line, read_toml
from crw.engine.config.roles import RolePair, RoleTable
from crw.engine.config.workflow import Workflow
from crw.engine.config.workflow_nodes import Review
from crw.engine.held_reasons import held_by_pause
from crw.journal.replay import TERMINAL_ROWS
from crw.journal.rows import Completed, Held, RowModel

Row = Mapping[str, Any]

REVIEW_REJECTED = "review_rejected"
"""The held reason of a review call that rejects after the node's last fix round."""

VERDICT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["verdict", "findings"],
    "additionalProperties": False,
    "properties": {
        "verdict": {"enum": ["accept", "reject"]},
        "findings": {"type": "array", "items": {"type": "string"}},
    },
}
"""The reviewer's answer: accept, or reject with the findings to fix."""


@dataclass(frozen=True)
class RunCall:
    """Run the node's call number `ordinal`: `kind` node, review or fix."""

    ordinal: int
    kind: str
    subject: int | None = None
    """A review: the ordinal of the call whose answer it judges."""
    handle: int | None = None
    """A fix: the ordinal of the call it continues (resume: handle)."""
    findings: tuple[str, ...] = ()
    """A fix: the findings of the review it answers."""


@dataclass(frozen=True)
class Finish:
    """The node is over: `row` is its end (the accepted answer's completed row, or
    the terminal row that stopped the chain)."""

    row: RowModel | Mapping[str, Any]


def next_action(review: Review | None, ends: Sequence[Mapping[str, Any]]) -> RunCall | Finish:
    """What the node does next, given the terminal rows of its calls 1..n in order."""
    n = len(ends)
    if n == 0:
        return RunCall(1, "node")
    last = ends[-1]
    if last.get("row") != "completed":
        return Finish(last)
    if review is None:
        return Finish(last)
    if n % 2 == 1:
        return RunCall(n + 1, "review", subject=n)
    if _verdict(last) == "accept":
        return Finish(ends[-2])
    return RunCall(n + 1, "fix", handle=n - 1, findings=findings(last))


def ends_of(
    node_id: str, by_call: Mapping[str, Sequence[Mapping[str, Any]]], first: int = 1
) -> list[Row]:
    """The terminal rows of `node_id`'s calls first, first+1, ... up to the first
    that has none (a call a decision sent back to run is not ended, nor one a
    pause held: the resumed run goes on with it in place). `first`: where a
    restarted node's calls start again."""
    ends: list[Row] = []
    while True:
        rows = by_call.get(f"{node_id}.{first + len(ends)}", ())
        end = None
        for row in rows:
            kind = row.get("row")
            if kind in TERMINAL_ROWS:
                end = row
            elif kind == "decision" and row.get("choice") == "retry":
                end = None
        if end is None or held_by_pause(end):
            return ends
        ends.append(end)


def judged_call(call: str) -> str:
    """The call a review call `<node>.<n>` judges: the one before it, `<node>.<n-1>`."""
    node, _, n = call.rpartition(".")
    return f"{node}.{int(n) - 1}"


def fixes_before(ordinal: int) -> int:
    """How many fix rounds ran before the review call `ordinal` (2, 4, ...)."""
    return (ordinal - 2) // 2


def settle_review(review: Review, ordinal: int, row: RowModel) -> RowModel:
    """A review call's terminal row: a rejection after the last fix round is held
    review_rejected, keeping the reviewer's result; anything else stays."""
    if not isinstance(row, Completed) or _verdict(row.model_dump()) != "reject":
        return row
    if fixes_before(ordinal) < review.rounds:
        return row
    found = findings(row.model_dump())
    return Held.model_validate(
        {
            "call": row.call,
            "reason": REVIEW_REJECTED,
            "error": (
                f"the {review.role} rejected the answer after {review.rounds} fix "
                f"round{'s' if review.rounds != 1 else ''}: " + "; ".join(found or ["no findings"])
            ),
            "tokens": row.tokens,
            "result": row.result,
            "result_digest": row.result_digest,
        }
    )


def node_end(review: Review | None, ends: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The row the node ended with, or None while its chain goes on."""
    action = next_action(review, ends)
    if isinstance(action, RunCall):
        return None
    row = action.row
    return row.model_dump() if isinstance(row, RowModel) else row


def findings(row: Mapping[str, Any]) -> tuple[str, ...]:
    result = row.get("result")
    items = result.get("findings") if isinstance(result, Mapping) else None
    return tuple(str(item) for item in items) if isinstance(items, list) else ()


def _verdict(row: Mapping[str, Any]) -> Any:
    result = row.get("result")
    return result.get("verdict") if isinstance(result, Mapping) else None


def reviewer_task(node_id: str, call: str, task: str, result: Any, workspace: str) -> str:
    """The review call's task: the node's task and the answer to judge."""
    return "\n\n".join(
        (
            f"Review the answer of node {node_id} (call {call}) to its task. Its work is in "
            f"{workspace}: read it there and change nothing.",
            "The task it was given:\n\n" + _quoted(task),
            "Its answer:\n\n" + _quoted(json.dumps(result, indent=2, sort_keys=True)),
            'Answer {"verdict": "accept", "findings": []} when the answer does the task, '
            'else {"verdict": "reject", "findings": [...]} with one finding for each thing '
            "to fix.",
        )
    )


def fix_task(task: str, reviewer: str, found: Sequence[str], record: str) -> str:
    """The fix call's task: the node's task, the findings, and the conversation."""
    items = "\n".join(f"- {finding}" for finding in found) or "- (no findings given)"
    return "\n\n".join(
        (
            record,
            "## The fix",
            f"The review {reviewer} rejected your answer. Its findings:\n{items}",
            "Fix each finding in the same workspace, then answer the original task again "
            "with the whole answer (not only what changed). The original task:\n\n" + _quoted(task),
        )
    )


def _quoted(text: str) -> str:
    return "\n".join(f"> {line}" if line else ">" for line in text.splitlines())


def fix_effort(review: Review, pair: RolePair) -> str | None:
    """The explicit effort a fix call's steps ask for: the review's fix_effort when
    the role leaves its effort undecided (the spawn hook keeps a spawn's effort
    then), else None: the role's (`check_fix_efforts` refused any other at load)."""
    return review.fix_effort if pair.effort is None else None


def check_fix_efforts(workflow: Workflow, roles: RoleTable, store: Path) -> None:
    """Refuse a review's fix_effort that differs from the effort its node's role
    decides: the spawn hook gives every spawn of the role that effort, so the fix
    could never run the one it asks for.

    Raises:
        InputError: one line `<workflow>:<line>: <what>; <fix>`; nothing is written.
    """
    for index, node in enumerate(workflow.nodes):
        asked = node.review.fix_effort if node.review else None
        decided = roles.roles[node.role].effort
        if asked is None or decided is None or asked == decided:
            continue
        _, text, _ = read_toml(workflow.path, "workflow")  # loaded a moment ago
        raise one_line(
            str(workflow.path),
            TomlSource(text).line_of(("node", index, "review", "fix_effort")),
            f"node '{node.id}' review: fix_effort = {json.dumps(asked)} differs from the "
            f"effort {json.dumps(decided)} the role store {store} decides for {node.role}, "
            "which every fix spawn runs",
            f"write fix_effort = {json.dumps(decided)}, leave it out, or leave effort out "
            f"of [{node.role}] in {store}",
        )
