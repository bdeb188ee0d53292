"""How many calls a run has, how many are done and in flight: the one count that
`status`, `list`, `watch` and the demo show, as the timeline draws one lane a call.

Pure: a `RunState` in (the replay of a run's rows), counts out. Every call the
rows name counts, review rounds, fix rounds and superseded calls included, so the
count is the calls `status` lists:

- done: the calls that ended for good (completed, null_model, skipped,
  superseded); a held call waits for a decision or the resume;
- in flight: the calls a process runs now (neither done nor held), and none in a
  run that is paused, ended, starting or whose process is gone;
- total: the calls so far and, for a run not ended, the calls its workflow still
  needs at least: one a node not begun, two a reviewed one (its call and its
  review), the review a reviewed node's answer waits for, and the fix and its
  review a rejection sends the node to (a rejection after the last fix round
  ends the review held, not completed). The total grows only when a rejection
  comes, and never shrinks.
  An ended run's total is the calls it ran;
- nodes: an ended run's nodes completed of all, as its ended row gives each
  one's end (labelled as nodes wherever shown).

`shown_state` is the run's state as the views name it: `crashed` for a run whose
rows leave it starting, running or waiting_session while no process holds it
(no paused or ended row came: its process died). Standard library only: the
commands that read a run start cold.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from crw.journal.replay import SETTLED_STATES, CallState, RunState

DONE = SETTLED_STATES
"""The states of a call that ended for good (completed, null_model, skipped,
superseded): no decision sends it on. They are the replay snapshot's settled
states: an ended run's settled calls count as done without being built."""
RUNNING_RUN = frozenset({"running", "waiting_session", "waiting_decision"})
"""The run states in which a process runs calls (a run waiting on a decision runs
its other calls to their end)."""
CRASHABLE = frozenset({"starting", "running", "waiting_session"})
"""The run states that need a process: a run in one no process holds crashed."""
NODE_OVER = frozenset({"null_model", "skipped"})
"""A call's ends that end its node: no review follows them."""


@dataclass(frozen=True)
class Counts:
    """A run's calls: `done` of `total`, the calls `in_flight` and `held`; an
    ended run's `nodes_completed` of `nodes` (None for a run not ended)."""

    done: int
    total: int
    in_flight: tuple[str, ...]
    held: int
    nodes_completed: int | None = None
    nodes: int | None = None

    def to_json(self) -> dict[str, Any]:
        """{done, total, in_flight, held, nodes: {completed, total} or null}."""
        nodes = None
        if self.nodes is not None:
            nodes = {"completed": self.nodes_completed, "total": self.nodes}
        return {
            "done": self.done,
            "total": self.total,
            "in_flight": len(self.in_flight),
            "held": self.held,
            "nodes": nodes,
        }


def shown_state(state: str, live: bool) -> str:
    """The run's state as the views show it: `crashed` when it needs a process
    and none holds it (`live`: its run lock or start lock is held)."""
    return "crashed" if not live and state in CRASHABLE else state


def chains(calls: Iterable[CallState]) -> dict[str, list[CallState]]:
    """Each node's calls since its last superseded one, in order: the chain its
    review rounds run in (`crw.engine.calls.review`: the node's call, its review,
    a fix, its review, ...; a restart starts the chain again)."""
    found: dict[str, list[CallState]] = {}
    for call in calls:
        if call.node is None:
            continue
        chain = found.setdefault(call.node, [])
        if call.state == "superseded":
            chain.clear()
        else:
            chain.append(call)
    return found


def reviews(calls: Iterable[CallState]) -> dict[str, str]:
    """Each review call and the call whose answer it judges: every second call of
    a node's chain (a node with no review has one call in its chain)."""
    return {
        chain[i].call: chain[i - 1].call
        for chain in chains(calls).values()
        for i in range(1, len(chain), 2)
    }


def counts(run: RunState, plan: Mapping[str, int] | None = None, *, live: bool = True) -> Counts:
    """The run's counts (see the module docstring). `plan`: each workflow node and
    the calls it needs at least (1, 2 for a reviewed node; `run_spec.workflow_plan`);
    `live`: whether a process holds the run. An ended run read from a replay
    snapshot counts its settled calls (done, all of them) without building them."""
    ended = run.state == "ended" or isinstance(run.ended_state, dict)
    deferred = run.deferred_calls() if ended else None
    settled = len(deferred.settled) if deferred is not None else 0
    calls = list(deferred.open.values() if deferred is not None else run.calls.values())
    running = live and run.state in RUNNING_RUN
    in_flight = tuple(
        call.call for call in calls if running and call.state not in DONE and call.state != "held"
    )
    done = settled + sum(call.state in DONE for call in calls)
    held = sum(call.state == "held" for call in calls)
    if ended:
        ends = run.ended_state if isinstance(run.ended_state, dict) else {}
        completed = sum(end == "completed" for end in ends.values())
        return Counts(done, settled + len(calls), in_flight, held, completed, len(ends))
    return Counts(done, len(calls) + _still_needed(calls, plan or {}), in_flight, held)


def _still_needed(calls: list[CallState], plan: Mapping[str, int]) -> int:
    """The calls the workflow needs at least beyond `calls`: every call of a node
    not begun, and the review a reviewed node's last answer waits for."""
    begun = chains(calls)
    needed = sum(least for node, least in plan.items() if node not in begun)
    for node, chain in begun.items():
        last = chain[-1]
        if plan.get(node, 1) < 2 or last.state in NODE_OVER:
            continue
        if len(chain) % 2 == 1:  # an answer its review judges next
            needed += 1
        elif last.state == "completed" and last.verdict == "reject":  # a fix and its review
            needed += 2
    return needed
