"""A node restarted afresh (`crw flow answer RUN CALL --restart`), as pure decisions.

The answer gives up on CALL and runs its node again in a new call `<node>.<n>`,
the node's next free ordinal, with a fresh attempt and packet: the decision row
names it (`by`). The run's next process supersedes CALL before the new call's
prepared row (ATT-36): every subagent CALL was bound to, or that took a step it
published (found on the host by the step's marker), is made to run nothing: a
running turn is interrupted, its interrupt_requested row (reason restart) durable
first, and the thread read until it is no longer active; a step file still
waiting is retracted. Only then is `superseded {by}` written, and the old
subagents get their close steps.

A reviewed node's chain starts again at the new call: `<node>.<n>` is the node's
call, `<node>.<n+1>` its review, and so on (`Restart.ordinal`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from crw.engine.steps.bind import find_marker_turn
from crw.host.protocol import Thread
from crw.journal.replay import RunState
from crw.journal.rows import InterruptRequested, Superseded, Tokens

Row = Mapping[str, Any]
RESTART = "restart"
"""The decision's choice, and the reason of the interrupt_requested rows it writes."""


def node_of(call: str) -> str:
    """The node of the call id `<node>.<n>`."""
    return call.rpartition(".")[0]


def ordinal(call: str) -> int:
    """The n of the call id `<node>.<n>`."""
    return int(call.rpartition(".")[2])


def successor(run: RunState, call: str) -> str:
    """The node's next free call: one past the highest ordinal its calls took."""
    node = node_of(call)
    taken = [ordinal(other) for other in run.calls if node_of(other) == node]
    return f"{node}.{max(taken, default=0) + 1}"


@dataclass(frozen=True)
class Restart:
    """A decision to restart `call`: `by` is the node's new call; `done` once the
    superseded row is written."""

    call: str
    by: str
    done: bool

    @property
    def node(self) -> str:
        return node_of(self.by)

    @property
    def ordinal(self) -> int:
        """The ordinal the node's calls start again at."""
        return ordinal(self.by)


def restarts(rows: Iterable[Row]) -> dict[str, Restart]:
    """Each restarted node's newest restart, by node id."""
    found: dict[str, Restart] = {}
    for row in rows:
        kind = row.get("row")
        if kind == "decision" and row.get("choice") == RESTART and row.get("by"):
            restart = Restart(call=str(row["call"]), by=str(row["by"]), done=False)
            found[restart.node] = restart
        elif kind == "superseded":
            done = found.get(node_of(str(row.get("call"))))
            if done is not None and done.call == row.get("call"):
                found[done.node] = Restart(done.call, done.by, done=True)
    return found


def waiting_steps(rows: Sequence[Row]) -> list[Row]:
    """The call's published steps no turn was bound to: their files are retracted,
    and a spawn's marker is looked up on the host."""
    bound = {(r.get("k"), r.get("attempt")) for r in rows if r.get("row") == "turn_started"}
    return [
        row
        for row in rows
        if row.get("row") == "step_published" and (row.get("k"), row.get("attempt")) not in bound
    ]


def subagents(rows: Sequence[Row]) -> dict[str, int]:
    """The subagents the call's rows bound (its thread_started rows, the targets of
    its send_input steps), each with its attempt."""
    found: dict[str, int] = {}
    for row in rows:
        kind = row.get("row")
        agent = row.get("thread_id") if kind == "thread_started" else None
        if kind == "step_published" and row.get("action") == "send_input":
            agent = row.get("agent_id")
        if agent:
            found[str(agent)] = int(row.get("attempt") or 1)
    return found


@dataclass(frozen=True)
class Interrupt:
    """Interrupt `row.turn_id` on `thread_id`, once `row` is durable."""

    thread_id: str
    row: InterruptRequested


@dataclass(frozen=True)
class Wait:
    """A subagent is still active after its interrupt: read it again."""

    thread_id: str


@dataclass(frozen=True)
class Supersede:
    """Every subagent runs nothing: write `row`, then close each of `closes`
    (attempt, subagent): those the host still has loaded."""

    row: Superseded
    closes: tuple[tuple[int, str], ...]


def judge(
    restart: Restart,
    rows: Sequence[Row],
    threads: Mapping[str, Thread | None],
    interrupted: Iterable[str],
) -> Interrupt | Wait | Supersede:
    """The next thing the supersession of `restart.call` does, given its `rows` and
    the host's snapshot of each subagent of the call (`threads`: the bound ones and
    those found by marker; None, one the host does not know: it runs nothing).
    `interrupted`: the turns an interrupt was sent to already."""
    sent = set(interrupted)
    for thread_id, thread in threads.items():
        if thread is None or thread.status.type != "active":
            continue
        running = [turn.id for turn in thread.turns if turn.status == "inProgress"]
        fresh = [turn_id for turn_id in running if turn_id not in sent]
        if fresh:
            return Interrupt(thread_id, _intent(restart.call, rows, thread, fresh[0]))
        return Wait(thread_id)
    attempts = subagents(rows)
    closes = tuple(
        (attempts.get(agent, _newest_attempt(rows)), agent)
        for agent, thread in threads.items()
        if thread is not None and thread.status.type != "notLoaded"
    )
    return Supersede(_superseded(restart, rows), closes)


def _intent(call: str, rows: Sequence[Row], thread: Thread, turn_id: str) -> InterruptRequested:
    """The interrupt_requested row of `turn_id`: the step and attempt it was bound
    to, or whose marker it carries."""
    step: Row = {}
    for row in rows:
        kind = row.get("row")
        if kind == "turn_started" and row.get("turn_id") == turn_id:
            step = row
        elif kind == "step_published" and not step:
            turn = find_marker_turn(str(row.get("marker") or ""), thread)
            if turn is not None and turn.id == turn_id:
                step = row
    return InterruptRequested(
        call=call, reason=RESTART, op=step.get("op"), attempt=step.get("attempt"), turn_id=turn_id
    )


def _newest_attempt(rows: Sequence[Row]) -> int:
    attempts = [int(r.get("attempt") or 1) for r in rows if r.get("row") == "step_published"]
    return max(attempts, default=1)


def _superseded(restart: Restart, rows: Sequence[Row]) -> Superseded:
    """The terminal row: the tokens of a call that ended no other way (the newest
    step's call_tokens, which no terminal row carries); a held call's were counted
    by its held row."""
    ends = [i for i, row in enumerate(rows) if row.get("row") == "held"]
    steps = [i for i, row in enumerate(rows) if row.get("row") == "step_published"]
    held = bool(ends) and (not steps or ends[-1] > steps[-1])
    counted = rows[steps[-1]].get("call_tokens") if steps and not held else None
    tokens = Tokens.model_validate(counted) if counted else None
    return Superseded(call=restart.call, by=restart.by, tokens=tokens)
