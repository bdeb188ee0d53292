"""Where an App Server call an earlier process left open goes on, decided.

Pure: the call's rows and, where they bound a thread, the host's read of it, in;
what the resumed call does, out. The call's rows are its newest generation (from
its newest prepared row on); a generation a terminal row ends is not open. The
resume table of the App Server path, by the rows the dead process left:

  rows                                what the resumed call does
  prepared                            publishes its first step, then as below
  step_published, no thread_started   starts the step's thread and turn
  thread_started, the step's turn     on the resumed thread (thread/resume with the
    not bound (no turn_started)       leaf keys): adopts the turn that carries the
                                      step's marker (turn_started), else starts the
                                      turn, once
  turn_started of the step            on the resumed thread: follows the turn
                                      (harvests a completed one, waits for a
                                      running one)

The marker is looked up before a turn is started again, so a turn whose turn/start
reached the host just before its process died is never sent twice. A review
round's fix call opens its thread its own way (`crw.actors.app_server_rounds`):
"starts the step's thread" is then a fork of the handle's thread, or, in the
resume's suffix this table is read in, the checkpoint branch (ATT-39).

A call whose newest terminal row is a hold answered retry (a decision row), or a
pause's hold on a resumed run, is open too: `held` names that hold until the call
publishes the step it goes on with (`crw.engine.holds.app_held`), and from then on the
table above goes on with that step.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from crw.engine.holds.interrupt import held_by_pause
from crw.engine.steps.bind import find_marker_turn
from crw.host.protocol import Thread

Row = Mapping[str, Any]
_TERMINAL = frozenset({"completed", "null_model", "held", "superseded"})


@dataclass(frozen=True)
class Generation:
    """An open call as its newest generation's rows leave it."""

    step: Row | None
    """The newest step_published row (None: the step was never published)."""
    thread_id: str | None
    """The thread the newest thread_started row bound."""
    turn_id: str | None
    """The turn a turn_started row bound to the step (its k)."""
    held: Row | None = None
    """The hold the call goes on from in place (answered retry, or a pause's on a
    resumed run), while no step was published after it."""


def generation(rows: Sequence[Row]) -> Generation | None:
    """The call's open generation, or None when the call has no prepared row, or
    its newest terminal row ended it (it runs from the start: prepared anew)."""
    start = next(
        (i for i in range(len(rows) - 1, -1, -1) if rows[i].get("row") == "prepared"), None
    )
    if start is None:
        return None
    step: Row | None = None
    thread_id: str | None = None
    ended: Row | None = None
    retried = False
    turns: dict[int, str] = {}
    for row in rows[start:]:
        kind = row.get("row")
        if kind in _TERMINAL:
            ended, retried = row, False
        elif kind == "decision":
            retried = ended is not None and row.get("choice") == "retry"
        elif kind == "step_published":
            step = row
            if ended is not None and (retried or held_by_pause(ended)):
                ended = None  # the step the call goes on with in place
        elif kind == "thread_started":
            thread_id = row.get("thread_id")
        elif kind == "turn_started":
            turns[int(row.get("k") or 1)] = str(row.get("turn_id"))
    if ended is not None and not (retried or held_by_pause(ended)):
        return None
    turn_id = turns.get(int(step.get("k") or 1)) if step is not None else None
    return Generation(step=step, thread_id=thread_id, turn_id=turn_id, held=ended)


Action = Literal["publish", "start_thread", "start_turn", "adopt", "follow"]


@dataclass(frozen=True)
class Resume:
    """What the resumed call does: `publish` its first step; `start_thread` for
    the step; `start_turn` on the bound thread; `adopt` the host's `turn_id`
    (write its turn_started) and follow it; `follow` the bound `turn_id`."""

    action: Action
    turn_id: str | None = None


def decide(open_call: Generation, thread: Thread | None) -> Resume:
    """The resumed call's next move. `thread` is the host's read of the bound
    thread, with its turns: None when the rows bound none, or the host has no
    rollout of it (codex writes it with the thread's first turn), so that the
    thread took no turn and the step goes on on a thread started anew."""
    if open_call.step is None:
        return Resume("publish")
    if open_call.thread_id is None or thread is None:
        return Resume("start_thread")
    if open_call.turn_id is not None:
        return Resume("follow", open_call.turn_id)
    turn = find_marker_turn(str(open_call.step.get("marker")), thread)
    if turn is not None:
        return Resume("adopt", turn.id)
    return Resume("start_turn")


def turn_text(journaled_input: str, tools: str | None) -> str:
    """An App Server turn's text from its journaled input: the Repository tools
    section, taken from the call's run and journaled nowhere, goes after it, as
    the undisturbed turn had it (STEP-57, STEP-61)."""
    return journaled_input if tools is None else f"{journaled_input}\n{tools}\n"
