"""The gate: which calls are admitted, and whether a call gets another attempt.

Pure decisions over the workflow and the state replay gives: a node is admitted
when every node it needs is done and the pool has room; a call gets at most
`MAX_ATTEMPTS` attempts, then it is held attempts_exhausted.
"""

from __future__ import annotations

from collections.abc import Set

from crw.engine.workflow import Node, Workflow

MAX_ATTEMPTS = 3
ATTEMPTS_EXHAUSTED = "attempts_exhausted"


def call_id(node: str, n: int) -> str:
    """The id of the `n`-th call of `node`: `<node>.<n>`, one path segment."""
    return f"{node}.{n}"


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
    taken = done | running | stopped
    waiting = [
        node
        for node in workflow.order()
        if node.id not in taken and all(need in done for need in node.needs)
    ]
    return waiting[:free]


def next_attempt(attempts_so_far: int, max_attempts: int = MAX_ATTEMPTS) -> int | None:
    """The number of the call's next attempt, or None when it has had
    `max_attempts` and is held attempts_exhausted."""
    if attempts_so_far >= max_attempts:
        return None
    return attempts_so_far + 1
