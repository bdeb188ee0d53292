"""The gate: which calls are admitted, and whether a call gets another attempt.

Pure decisions over the workflow and the state replay gives: a node is admitted
when every node it needs is done and the pool has room, and the run has not
reached its token ceiling; a call gets at most `MAX_ATTEMPTS` attempts, then it
is held attempts_exhausted.

The run's running token figure is `RunSpent`: what the terminal rows counted when
the process started, plus what each call this process runs has counted so far,
the tokens a resumed call takes from its step_published row included (HARV-22).
A call's figure is replaced, never added to, so each token counts once (HARV-24);
a turn that was not measured adds nothing (HARV-27).
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Set
from dataclasses import dataclass, field
from typing import Any

from crw.engine.calls import review
from crw.engine.config.workflow import Workflow
from crw.engine.config.workflow_nodes import Node
from crw.journal.replay import TERMINAL_ROWS, RunState
from crw.journal.rows import NO_TOKENS, Ended, Tokens

MAX_ATTEMPTS = 3
ATTEMPTS_EXHAUSTED = "attempts_exhausted"
TOKEN_CEILING = "token_ceiling"
"""The reason of the paused row a run writes at its token ceiling."""


@dataclass
class RunSpent:
    """The run's tokens as this process counts them (spec's RunSpent)."""

    before: Tokens = field(default_factory=Tokens)
    """What the terminal rows counted when the process started, and those of the
    calls it settled since."""
    calls: dict[str, Tokens] = field(default_factory=dict)
    """Each call this process runs and has not settled: what it has counted so far."""
    total: Tokens = field(init=False)
    """`before` plus every call's figure, kept as the calls count."""

    def __post_init__(self) -> None:
        self.total = self.before
        for tokens in self.calls.values():
            self.total = self.total + tokens

    @classmethod
    def of(cls, replayed: RunState) -> RunSpent:
        return cls(before=Tokens(**replayed.spent))

    def count(self, call: str, call_tokens: Tokens) -> None:
        """`call` has counted `call_tokens` in all (its turns so far, and what it
        took from its step_published row): replaces what it counted before."""
        previous = self.calls.get(call, NO_TOKENS)
        self.calls[call] = call_tokens
        self.total = self.total - previous + call_tokens

    def settle(self, call: str, call_tokens: Tokens) -> None:
        """`call` ended, its terminal row carrying `call_tokens`, all it counted:
        they join `before`, and the call is forgotten (a 10,000-call run keeps no
        figure for each call it finished)."""
        previous = self.calls.pop(call, None)
        if previous is None:  # never counted (an App Server call): nothing to take back
            self.total = self.total + call_tokens
        else:
            self.total = self.total - previous + call_tokens
        self.before = self.before + call_tokens

    def spent(self) -> Tokens:
        """The run's figure now: every token counted once (kept, not summed again)."""
        return self.total


def ceiling_reached(spent: Tokens, ceiling: int | None) -> bool:
    """Whether a run that counted `spent` admits no more calls: its total reached
    the workflow's `token_ceiling` (never, without one)."""
    return ceiling is not None and spent.total >= ceiling


def call_id(node: str, n: int) -> str:
    """The id of the `n`-th call of `node`: `<node>.<n>`, one path segment."""
    return f"{node}.{n}"


class Admission:
    """The gate's admission, kept as the run goes: each node waiting to run counts
    its needs not yet completed, and joins the ready queue (kept in
    `workflow.order()`) when its last need completes. Admitting or completing a
    call touches the node and the nodes that need it, never the whole workflow.

    Args:
        done: the ids of the nodes whose calls completed (a resumed run's replayed
            results).
        taken: the ids of the nodes that never join the queue: running, or whose
            calls ended without completing (held, null_model, …).
    """

    def __init__(self, workflow: Workflow, done: Set[str], taken: Set[str] = frozenset()) -> None:
        self._graph = workflow.graph()
        self._missing: dict[str, int] = {}
        self._ready: list[int] = []
        self._needers: dict[str, int] = {}
        """For each node a node waiting to run needs: how many such nodes do."""
        for node in self._graph.order:
            if node.id in done or node.id in taken:
                continue
            needs = node.needs
            missing = 0
            for need in needs:
                self._needers[need] = self._needers.get(need, 0) + 1
                missing += need not in done
            self._missing[node.id] = missing
            if missing == 0:
                self._ready.append(self._graph.position[node.id])
        self.steps = len(self._graph.order)
        """Nodes touched so far (tests pin the admission's cost with it)."""

    def admit(self, free: int) -> list[Node]:
        """Up to `free` ready nodes, first in the workflow's order; they leave the queue."""
        admitted: list[Node] = []
        while self._ready and len(admitted) < free:
            node = self._graph.order[heapq.heappop(self._ready)]
            del self._missing[node.id]
            for need in node.needs:  # it takes its needs' results as it is admitted
                left = self._needers[need] - 1
                if left:
                    self._needers[need] = left
                else:
                    del self._needers[need]
            admitted.append(node)
            self.steps += 1
        return admitted

    def needed(self, node_id: str) -> bool:
        """Whether a node waiting to run needs `node_id`: its result is kept until
        the last such node is admitted (a run keeps no result nothing will read)."""
        return node_id in self._needers

    def completed(self, node_id: str) -> None:
        """`node_id`'s call completed: a node waiting on it as its last need is ready."""
        for dependent in self._graph.dependents.get(node_id, ()):
            self.steps += 1
            if dependent in self._missing:
                self._missing[dependent] -= 1
                if self._missing[dependent] == 0:
                    heapq.heappush(self._ready, self._graph.position[dependent])


def ready(
    workflow: Workflow,
    done: Set[str],
    running: Set[str],
    pool: int,
    stopped: Set[str] = frozenset(),
) -> list[Node]:
    """The nodes to admit now, in `workflow.order()`: not done, running or stopped,
    every need done, and no more than the pool's free slots (`pool - len(running)`).

    Args:
        done: the ids of the nodes whose calls completed.
        running: the ids of the nodes with a call in flight.
        stopped: the ids of the nodes whose calls ended without completing (held,
            null_model, …): never admitted again by the gate alone.
    """
    free = pool - len(running)
    if free <= 0:
        return []
    return Admission(workflow, done, running | stopped).admit(free)


def next_attempt(attempts_so_far: int, max_attempts: int = MAX_ATTEMPTS) -> int | None:
    """The number of the call's next attempt, or None when it has had
    `max_attempts` and is held attempts_exhausted."""
    if attempts_so_far >= max_attempts:
        return None
    return attempts_so_far + 1


def taken(
    replayed: RunState, workflow: Workflow | None = None, first: Mapping[str, int] | None = None
) -> tuple[dict[str, Any], dict[str, str]]:
    """From the rows: the completed nodes' results, and how each ended node ended.
    A node with a review (in `workflow`) ends as its round's rows decide, from its
    call `first[node]` on (a restarted node's new call); a superseded call ends
    no node: its node's new call does."""
    first = first or {}
    results: dict[str, Any] = {}
    finished: dict[str, str] = {}
    reviewed = {n.id: n.review for n in workflow.nodes if n.review} if workflow else {}
    ends: dict[str, dict[str, Any]] = {}
    for call in replayed.calls.values():
        if call.node is None or call.state == "superseded":
            continue
        if call.state == "skipped":  # answered skip: the node ends with no result
            finished[call.node] = call.state
            continue
        if call.state not in TERMINAL_ROWS:
            continue
        if call.node in reviewed:
            ends[call.call] = {"row": call.state, "result": call.result}
            continue
        if call.state == "completed":
            results[call.node] = call.result
        finished[call.node] = call.state
    by_call = {call: [row] for call, row in ends.items()}
    for node_id, rounds in reviewed.items():
        if node_id in finished:
            continue
        end = review.node_end(rounds, review.ends_of(node_id, by_call, first.get(node_id, 1)))
        if end is not None:
            finished[node_id] = str(end["row"])
            if end["row"] == "completed":
                results[node_id] = end.get("result")
    return results, finished


def all_completed(workflow: Workflow, finished: Mapping[str, str]) -> bool:
    """Whether every node of `workflow` ended completed (`finished`: each ended
    node's end)."""
    return all(finished.get(node.id) == "completed" for node in workflow.nodes)


def ended_row(workflow: Workflow, finished: Mapping[str, str]) -> Ended:
    """The run's ended row once nothing more can run: completed when every node
    completed, else failed; each node's end (`unrun` for a node that never ran)."""
    status = "completed" if all_completed(workflow, finished) else "failed"
    state = {node.id: finished.get(node.id, "unrun") for node in workflow.nodes}
    return Ended(status=status, state=state)
