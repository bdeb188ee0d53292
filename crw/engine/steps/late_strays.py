"""A duplicate spawned for a step whose call has ended: the run closes it.

The owner may spawn one step twice. The call's binder closes the duplicates it
finds at the bind and again when the bound turn ends (`StepBinder.close_strays`);
one spawned after that look, or after the call's terminal row, and never
reported, would run on (a thread slot, tokens). The marker search's index names
every subagent of the owner by the marker of its first message; one that carries
this run's packet of a step its call will never bind again is a duplicate: it
gets a close step, and the call's op a session_host_warning several_spawns,
once (the journal's rows tell whether it was written: ROWS-14, DISP-16, DISP-25).

Only a step another subagent took (its turn was bound), or one of an attempt
that is over, has duplicates, and only once its call has ended (until then the
call's binder closes them). A held call goes on in place with a step it
published and did not bind, looking it up by its marker (ATT-35): that subagent
is asked about again, never closed, while the call is held.

Pure: markers, call records and host snapshots in, verdicts and rows out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from crw.engine.steps import markers
from crw.engine.steps.replies import CallRecord
from crw.engine.steps.step_match import first_message, named_packet
from crw.host.protocol import Thread
from crw.journal.rows import SessionHostWarning

Verdict = Literal["read", "wait", "drop"]
"""read: the subagent may be a duplicate, read it now (`is_duplicate`); wait: its
step is not settled yet, ask again later; drop: it is never one."""


@dataclass(frozen=True)
class Step:
    """The step a marker names: its call, turn k and attempt."""

    call: str
    k: int
    attempt: int

    @property
    def op(self) -> str:
        return markers.op(self.call, self.k)


def step_of(marker: str) -> Step | None:
    """The step `marker` names (None: no marker of a call's step)."""
    parsed = markers.parse(marker)
    return Step(*parsed) if parsed is not None else None


def verdict(step: Step, agent: str, record: CallRecord) -> Verdict:
    """Whether subagent `agent`, whose first message carries `step`'s marker, can
    be a duplicate of it, from the step's call's `record`."""
    if agent in record.agents:
        return "drop"  # the call's own: closed with its call (HARV-56)
    if record.ended is None:
        return "wait"  # the call's binder closes the strays of its steps
    if _taken(step, record):
        return "read"
    return "wait" if record.ended == "held" else "drop"


def _taken(step: Step, record: CallRecord) -> bool:
    """Another subagent took `step` (its turn was bound), or its attempt is over."""
    return (
        (step.attempt, step.k) in record.turns
        or step.attempt in record.lost
        or step.attempt < record.attempt
    )


def is_duplicate(run: str, owner: str, step: Step, thread: Thread) -> bool:
    """The subagent, read now, is an open one of the owner whose first message names
    run `run`'s packet of `step` (another run's step of the same marker is that
    run's to close)."""
    if thread.parentThreadId != owner or thread.status.type == "notLoaded" or not thread.turns:
        return False
    packet = (run, "steps", step.call, f"packet-t{step.k}-a{step.attempt}.md")
    return named_packet(first_message(thread.turns[0])) == packet


def warning(step: Step, record: CallRecord) -> SessionHostWarning | None:
    """The step's several_spawns row, unless the call's rows record it already."""
    if step.op in record.warned:
        return None
    return SessionHostWarning(call=step.call, op=step.op, warnings=["several_spawns"])
