"""Where a session call stands, from its rows: the resume table as data.

A session call goes on from its last row (the spec's resume table): after
`prepared` it publishes its first step; after `step_published` it looks the step
up (reports first, then the host) or publishes the same step again; after
`thread_started` it adopts the subagent and writes only its turn_started; after
`turn_started` it retracts the dead process's step file and reads the turn; after
`session_attempt_lost` it closes the old subagent and spawns the next attempt. This
module reads the rows into the facts that decide which; the call actor acts.

A held call that goes on in place (answered retry, or held by a pause when the
run resumes) with its step published and never bound looks it up by its marker
first too; but its hold retracted the step and its rows read it held, so the
step written again is published again, its row first (`publish_again`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from crw.journal.replay import TERMINAL_ROWS
from crw.journal.rows import StepPublished

Row = Mapping[str, Any]


@dataclass
class CallProgress:
    """The newest state of one call's rows (its newest generation)."""

    prepared: Row | None = None
    step: Row | None = None
    """The newest step_published row; once a terminal row of the call follows it,
    without its call_tokens: that row carries them, so a held call that goes on
    with the step (answered retry, or paused and resumed) counts only what its
    turns add (HARV-21, HARV-24)."""
    thread: Row | None = None
    """The thread_started row bound to the newest step's attempt, if any."""
    turn: Row | None = None
    """The turn_started row of the newest step, if it was bound."""
    ended: Row | None = None
    """The call's terminal row, if it has one."""
    retry: Row | None = None
    """The held row a decision answered retry, until the call goes on from it (a
    step published or a subagent bound): the call goes on in place."""
    lost: Row | None = None
    """The session_attempt_lost row of the newest step's attempt, if it was lost."""
    pairs: list[dict[str, Any]] = field(default_factory=list)
    """The pairs earlier thread_started rows of the call were bound with."""
    last: str | None = None

    @property
    def bound_thread_id(self) -> str | None:
        return str(self.thread["thread_id"]) if self.thread else None

    def go_on_with(self, step: Row) -> None:
        """The call goes on with the published `step`, not bound yet: a spawn's
        subagent is a new one, and the one before it an earlier pair of the call."""
        self.step, self.turn, self.lost, self.retry = step, None, None, None
        if step.get("action") != "send_input" and self.thread is not None:
            self.pairs.append(_pair(self.thread))
            self.thread = None


def progress(rows: Iterable[Row]) -> CallProgress:
    """Fold one call's rows, in journal order, into its progress."""
    state = CallProgress()
    for row in rows:
        kind = row.get("row")
        if kind == "evidence_placed":
            continue  # it changes no reading of the call's state (ROWS-11)
        state.last = kind
        if kind == "prepared":
            state = CallProgress(prepared=row, last=kind)
        elif kind == "step_published":
            state.go_on_with(row)
        elif kind == "thread_started":
            state.thread, state.retry = row, None
        elif kind == "turn_started" and state.step and row.get("k") == state.step.get("k"):
            state.turn, state.retry = row, None
        elif kind == "session_attempt_lost":
            state.lost = row
        elif kind in TERMINAL_ROWS:
            state.ended = row
            if state.step is not None and state.step.get("call_tokens") is not None:
                state.step = {**state.step, "call_tokens": None}
        elif kind == "decision" and row.get("choice") == "retry" and state.ended is not None:
            state.retry, state.ended = state.ended, None
    return state


def publish_again(rows: Iterable[Row]) -> StepPublished | None:
    """The row a call's step written again after its look-up found nothing is
    committed with (ATT-21, ATT-35), before its files (STEP-21). None while the
    newest step_published row is still the intent of the step's files: a process
    died waiting for its bind, and the resumed one writes the files that row
    meant. The same step again (its k, attempt, op, marker, input, packet and
    conversation place) when a terminal row came after that row: the hold
    retracted the step file and ended the row's intent, and every reader of the
    rows (`next`, `status`, the owner's wake) reads the call held until a row
    says it waits again. Its call_tokens are left out: the held row counted them
    (HARV-24). None too for a step whose turn was bound: nothing is written again."""
    state = progress(rows)
    held = state.ended is not None or state.retry is not None
    if state.step is None or state.turn is not None or not held:
        return None
    again = {k: v for k, v in state.step.items() if k not in ("seq", "at", "call_tokens")}
    return StepPublished.model_validate(again)


def _pair(thread_started: Row) -> dict[str, Any]:
    return {"model": thread_started.get("model"), "effort": thread_started.get("effort")}
