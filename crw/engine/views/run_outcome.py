"""What `wait` and `result` read of a run: the outcome a waiter ends on, its exit
code, and the final answer of each node.

Pure: a `RunState` (`crw.journal.replay`) and whether a process holds the run in,
decisions out. Standard library only: the commands start cold.

The outcome a waiter ends on (docs/cli.md, "Exit codes of wait and result"):

| the run's rows leave it                         | live | outcome            | exit |
|-------------------------------------------------|------|--------------------|------|
| ended `completed`                               | any  | `completed`        | 0    |
| ended `failed` (a node null_model, skipped, …)  | any  | `failed`           | 1    |
| ended `aborted` (`crw flow answer --abort`)     | any  | `aborted`          | 1    |
| ended `cancelled`                               | any  | `cancelled`        | 5    |
| `waiting_decision` (a held call)                | no   | `waiting_decision` | 3    |
| `paused`                                        | no   | `paused`           | 4    |
| starting, running, waiting_session, or a held   | yes  | none: it waits on  |      |
| or paused run whose process still drains        |      |                    |      |
| starting, running, waiting_session              | no   | none: it waits on  |      |

The last line is a run whose process died (or a launch that never came up): it
has not ended, and a resume goes on with it (`crw flow resume`, or on the session
backend the owner's `crw flow next`, which resumes a run no process holds). A
waiter waits on until it is resumed and ends, or its time runs out
(`timeout`, exit 124).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from crw.journal.replay import RunState

EXIT_CODES = {
    "completed": 0,
    "failed": 1,
    "aborted": 1,
    "waiting_decision": 3,
    "paused": 4,
    "cancelled": 5,
    "timeout": 124,
}
"""Each outcome's exit code; an ended status a later crw writes exits 1."""
STOPPED = frozenset({"waiting_decision", "paused"})
"""States a run stays in once no process holds it, until a person answers or resumes it."""


def settled(run: RunState, live: bool) -> str | None:
    """The outcome a waiter ends on (see the module's table), or None while it
    waits on. `live`: a process holds the run or is launching it."""
    if run.state == "ended":
        return run.ended_status or "failed"
    if not live and run.state in STOPPED:
        return run.state
    return None


def exit_code(outcome: str) -> int:
    """The exit code of `outcome` (1 for an ended status this crw does not know)."""
    return EXIT_CODES.get(outcome, 1)


@dataclass(frozen=True)
class NodeAnswer:
    """A node's end as the ended row gives it, and the call whose answer is the
    node's (None when the node did not complete)."""

    node: str
    end: str
    call: str | None
    answer: Any


def node_answers(run: RunState) -> list[NodeAnswer]:
    """Each node of an ended run with its end and final answer: in its ended row's
    order, with that row's ends; a run aborted (`crw flow answer --abort`, which
    writes no ended row) each node its calls name, its end its newest call's state.

    A node's calls are `<node>.<n>`; a restart starts them again at the call its
    decision names (`by`). A node without a review ends with its one call; a
    reviewed node's chain is the node's call, its review, a fix, its review, …,
    and ends completed with the review that accepts (an even place in the chain):
    the answer is the one that review judged, the call before it.
    """
    chains: dict[str, list[tuple[int, str]]] = {}
    first: dict[str, int] = {}
    for state in run.calls.values():
        node, _, number = state.call.rpartition(".")
        if not number.isdigit():
            continue
        chains.setdefault(node, []).append((int(number), state.call))
        again = (state.by or "").rpartition(".")[2]
        if again.isdigit():
            first[node] = max(first.get(node, 1), int(again))
    chain = {
        node: [call for n, call in sorted(calls) if n >= first.get(node, 1)]
        for node, calls in chains.items()
    }
    if isinstance(run.ended_state, dict):
        ends = {str(node): str(end) for node, end in run.ended_state.items()}
    else:
        ends = {node: run.calls[calls[-1]].state for node, calls in chain.items() if calls}
    answers = []
    for node, end in ends.items():
        call = _answered(chain.get(node, []), run) if end == "completed" else None
        if call is None and end == "completed":  # a review round the abort cut short
            end = "unfinished"
        answer = run.calls[call].result if call is not None else None
        answers.append(NodeAnswer(node, end, call, answer))
    return answers


def _answered(chain: list[str], run: RunState) -> str | None:
    """The call of a completed node's chain whose answer is the node's."""
    last = run.calls[chain[-1]] if chain else None
    if last is None or last.state != "completed":
        return None
    if len(chain) == 1:
        return chain[0]
    verdict = last.result.get("verdict") if isinstance(last.result, dict) else None
    return chain[-2] if len(chain) % 2 == 0 and verdict == "accept" else None
