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

from collections.abc import Set
from dataclasses import dataclass, field

from crw.engine.workflow import Node, Workflow
from crw.journal.replay import RunState
from crw.journal.rows import Tokens

MAX_ATTEMPTS = 3
ATTEMPTS_EXHAUSTED = "attempts_exhausted"
TOKEN_CEILING = "token_ceiling"
"""The reason of the paused row a run writes at its token ceiling."""


@dataclass
class RunSpent:
    """The run's tokens as this process counts them (spec's RunSpent)."""

    before: Tokens = field(default_factory=Tokens)
    """What the terminal rows counted when the process started."""
    calls: dict[str, Tokens] = field(default_factory=dict)
    """Each call this process runs: what it has counted so far."""

    @classmethod
    def of(cls, replayed: RunState) -> RunSpent:
        return cls(before=Tokens(**replayed.spent))

    def count(self, call: str, call_tokens: Tokens) -> None:
        """`call` has counted `call_tokens` in all (its turns so far, and what it
        took from its step_published row): replaces what it counted before."""
        self.calls[call] = call_tokens

    def spent(self) -> Tokens:
        """The run's figure now: every token counted once."""
        total = self.before
        for tokens in self.calls.values():
            total = total + tokens
        return total


def ceiling_reached(spent: Tokens, ceiling: int | None) -> bool:
    """Whether a run that counted `spent` admits no more calls: its total reached
    the workflow's `token_ceiling` (never, without one)."""
    return ceiling is not None and spent.total >= ceiling


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
