"""A rerun from a node (`crw flow rerun RUN --from NODE`), as pure decisions.

A rerun is a new run of the workflow in which NODE and every node that needs it,
directly or not, run afresh, and every other node that completed in the source
run takes the source's answer instead of running: its calls are written as a
`reused` row (the source run and call, the answer's digest, the tokens the source
counted, not spent again) followed by the source's completed row as it was (its
result, digest, raw text and span, pending tree), without its tokens. Every
reader of a completed row (the gate's results, a task's `{node.field}`, review,
status, result) reads a reused answer as the one the source computed. A node that
did not complete in the source runs afresh, unless NODE needs it: then there is
no answer to start from and the rerun is refused.

`plan_reuse` decides it from the source's rows and the workflow the rerun runs (the
source's own, or an edited one): every refusal is one line naming the node, what
is wrong and the rerun that would be taken, before anything is written.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from crw.engine.answers.schema_check import SchemaCheckTimedOut, check
from crw.engine.calls import gate, review
from crw.engine.config.workflow import Workflow
from crw.engine.holds import supersede
from crw.errors import InputError, RefusedError
from crw.journal.replay import RunState, replay
from crw.journal.rows import (
    Completed,
    CrwCommit,
    Reused,
    RowModel,
    Tokens,
    dump_row,
    parse_row,
)

Row = Mapping[str, Any]

_COPIED = (
    "result",
    "result_digest",
    "raw_text",
    "result_span",
    "extracted",
    "pending_tree",
    "attempt",
    "k",
)
"""The completed row's fields a reused call keeps: all but its tokens and the
executor's moved HEAD (the source's stray ref keeps it; the rerun made no worktree)."""


@dataclass(frozen=True)
class Reuse:
    """What a rerun takes from its source: the nodes and the rows that record it."""

    source: str
    """The source run's id."""
    start_from: str
    """NODE: the first node that runs afresh."""
    nodes: tuple[str, ...]
    """The nodes that take the source's answers, in the workflow's order."""
    afresh: tuple[str, ...]
    """The nodes that run: every other node, in the workflow's order."""
    rows: tuple[RowModel, ...]
    """The reused and completed rows of each reused call, in order: one batch."""

    def for_run(self, node_ref: Callable[[str], str]) -> Reuse:
        """The rows for the rerun whose node branches `node_ref` names (of a node):
        each reused crw.commit advances the rerun's node branch, created against
        no ref, to the source's commit."""
        rows = tuple(
            row.model_copy(update={"node_ref": node_ref(str(row.node))})
            if isinstance(row, CrwCommit)
            else row
            for row in self.rows
        )
        return replace(self, rows=rows)

    def to_json(self) -> dict[str, Any]:
        """What `reused.json` holds: the rows as their journal lines' objects."""
        return {
            "source": self.source,
            "from": self.start_from,
            "nodes": list(self.nodes),
            "rows": [dump_row(row) for row in self.rows],
        }


def write_reused(path: Path, reuse: Reuse) -> None:
    """Write a rerun's reused.json (a new file, synced) before run.json names it.

    Raises:
        RefusedError: it cannot be written.
    """
    text = json.dumps(reuse.to_json())  # a lone surrogate of an answer as its escape
    try:
        with open(path, "x", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
    except OSError as err:
        raise RefusedError(
            f"cannot write {path}: {err.strerror or err}; "
            "make the state directory writable and rerun again"
        ) from err


def read_reused(path: Path, run: str) -> list[RowModel]:
    """The rows a rerun's `reused.json` (`Reuse.to_json`) holds, to commit as they are.

    Raises:
        InputError: the file is missing or is not a rerun's reused.json.
    """
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return [parse_row(dict(row)) for row in data["rows"]]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise InputError(
            f"run {run} is a rerun and its {path} cannot be read ({err}); "
            "remove the run (crw flow rm) and rerun its source again"
        ) from None


def downstream(workflow: Workflow, node: str) -> set[str]:
    """`node` and every node that needs it, directly or not."""
    dependents = workflow.graph().dependents
    found, todo = {node}, [node]
    while todo:
        for dependent in dependents.get(todo.pop(), ()):
            if dependent not in found:
                found.add(dependent)
                todo.append(dependent)
    return found


def upstream(workflow: Workflow, node: str) -> set[str]:
    """The nodes `node` needs, directly or not."""
    needs = {n.id: n.needs for n in workflow.nodes}
    found: set[str] = set()
    todo = list(needs.get(node, ()))
    while todo:
        need = todo.pop()
        if need not in found:
            found.add(need)
            todo.extend(needs.get(need, ()))
    return found


def plan_reuse(
    source: str, rows: Sequence[Row], workflow: Workflow, start_from: str, fix: str
) -> Reuse:
    """What a rerun of `source` (its journal's `rows`) from `start_from` takes, on
    `workflow`. `fix` is the rerun's command line without `--from NODE`: a refusal
    names it with the node to rerun from instead.

    Raises:
        InputError: `start_from` is no node of `workflow`; a node it needs did not
            complete in the source; or an answer to reuse does not pass its node's
            schema in `workflow` (the node named, with the schema's error).
    """
    ids = [node.id for node in workflow.nodes]
    if start_from not in ids:
        raise InputError(
            f"--from {start_from}: no node {start_from} in {workflow.path}; "
            f"rerun from one of: {', '.join(ids)}"
        )
    state = replay(rows)
    first = {node: restart.ordinal for node, restart in supersede.restarts(rows).items()}
    results, finished = gate.taken(state, workflow, first)
    afresh = downstream(workflow, start_from)
    needed = upstream(workflow, start_from)
    by_call = _by_call(rows)
    reused: list[str] = []
    out: list[RowModel] = []
    for node in workflow.order():
        if node.id in afresh:
            continue
        if node.id not in results:
            if node.id in needed:
                ended = finished.get(node.id, "unrun")
                raise InputError(
                    f"run {source}: node {node.id}, which {start_from} needs, ended {ended} "
                    f"and has no answer to reuse; rerun from it instead: {fix} --from {node.id}"
                )
            continue
        problem = _schema_problem(results[node.id], node.output_schema)
        if problem is not None:
            raise InputError(
                f"run {source}: node {node.id}'s answer does not pass its schema in "
                f"{workflow.path} ({problem}); rerun from it instead: {fix} --from {node.id}"
            )
        calls = _answering_calls(state, node.id, node.review is not None, by_call, first)
        for ordinal, call in enumerate(calls, start=1):
            out += _call_rows(source, state, call, gate.call_id(node.id, ordinal), by_call)
        reused.append(node.id)
    return Reuse(
        source=source,
        start_from=start_from,
        nodes=tuple(reused),
        afresh=tuple(node.id for node in workflow.order() if node.id not in reused),
        rows=tuple(out),
    )


def _schema_problem(result: Any, schema: Mapping[str, Any]) -> str | None:
    try:
        errors = check(result, schema)
    except SchemaCheckTimedOut as err:
        return str(err)
    if not errors:
        return None
    more = f" and {len(errors) - 1} more" if len(errors) > 1 else ""
    return errors[0] + more


def _by_call(rows: Sequence[Row]) -> dict[str, list[Row]]:
    by_call: dict[str, list[Row]] = {}
    for row in rows:
        call = row.get("call")
        if isinstance(call, str):
            by_call.setdefault(call, []).append(row)
    return by_call


def _answering_calls(
    state: RunState,
    node: str,
    reviewed: bool,
    by_call: Mapping[str, Sequence[Row]],
    first: Mapping[str, int],
) -> list[str]:
    """The source's calls that make the node's answer: a reviewed node's rounds in
    order (its call, each review and fix), else its one completed call."""
    start = first.get(node, 1)
    if reviewed:
        ends = review.ends_of(node, by_call, start)
        return [f"{node}.{start + n}" for n in range(len(ends))]
    done = [c.call for c in state.calls.values() if c.node == node and c.state == "completed"]
    return done[-1:]


def _call_rows(
    source: str, state: RunState, call: str, new: str, by_call: Mapping[str, Sequence[Row]]
) -> list[RowModel]:
    """The reused row of `new` for the source's `call`, and its completed row."""
    calls = by_call[call]
    completed = next(row for row in reversed(calls) if row.get("row") == "completed")
    prepared = next((row for row in calls if row.get("row") == "prepared"), {})
    judged = prepared.get("review")
    node, _, _ = new.rpartition(".")
    earlier = next((row for row in calls if row.get("row") == "reused"), None)
    saved = Tokens(**state.calls[call].tokens)
    if earlier is not None:  # a rerun's reused call: what its own source spent
        saved = Tokens.model_validate(earlier.get("saved_tokens") or {})
        judged = earlier.get("review")
    reused = Reused(
        call=new,
        node=node,
        role=state.calls[call].role,
        source_run=source,
        source_call=call,
        result_digest=completed.get("result_digest"),
        saved_tokens=saved,
        review=review.judged_call(new) if judged else None,
    )
    body = {key: completed[key] for key in _COPIED if completed.get(key) is not None}
    out: list[RowModel] = [reused, Completed.model_validate(body | {"call": new})]
    made = next((row for row in reversed(calls) if row.get("row") == "crw_commit"), None)
    if made is not None and completed.get("pending_tree"):  # the node branch keeps it
        kept = {key: made.get(key) for key in ("node", "tree", "start", "commit", "when")}
        out.append(CrwCommit.model_validate(kept | {"call": new}))
    return out
