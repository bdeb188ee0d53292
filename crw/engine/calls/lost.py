"""The lost rule: whether a bound attempt's subagent will not finish its turn.

The spec (session-calls.md, "Attempts, restarts and continuations"): an attempt
is lost only when its marker turn is not completed, its thread is notLoaded,
systemError or unknown to the host, and the turn ended interrupted or failed
without an error, or has not changed for LostAfter; the thread is read once more
before. A thread the host cannot be asked about is not judged, and an active one
is waited for.

Pure: one host read of the attempt's thread (`Thread`, `Unknown` or
`Unreadable`), what the call saw of it before (`Seen`) and the clock in; a
decision out. The call actor reads, asks `judge`, and waits as the decision says.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from crw.engine.calls.gate import ATTEMPTS_EXHAUSTED, next_attempt
from crw.engine.steps import step_input
from crw.engine.steps.bind import find_marker_turn
from crw.host.protocol import Thread, Turn
from crw.journal.rows import Held, SessionAttemptLost, StepPublished
from crw.settings import Settings

DEAD = frozenset({"notLoaded", "systemError", "unknown"})
"""The host statuses under which an attempt may be lost ("unknown": the host has
no such thread)."""

LostReason = Literal["turn_interrupted", "turn_failed_without_error", "turn_unchanged"]


@dataclass(frozen=True)
class Unknown:
    """The host answered that it has no such thread."""


@dataclass(frozen=True)
class Unreadable:
    """The host could not be asked about the thread now (a request that timed out,
    an error other than an unknown thread)."""

    error: str


HostRead = Thread | Unknown | Unreadable

Look = tuple[str, str | None, int, bool]
"""What a read showed of the attempt: the host status, the turn's status, how many
items the turn holds and whether it carries an error."""


@dataclass(frozen=True)
class Seen:
    """What the call saw of the attempt before this read.

    `look`: the newest look (None before the first answered read). `since`: the
    clock time the look last changed (the LostAfter time runs from it). `recheck`:
    the read before judged the attempt lost; this read confirms it or clears it.
    """

    look: Look | None = None
    since: float = 0.0
    recheck: bool = False


@dataclass(frozen=True)
class Wait:
    """Wait until the clock reads `until` (or for the thread's next change), then
    read again. A deadline, not a duration: a clock that jumps to it (Trio's
    MockClock) then reads exactly the time the rule compares with."""

    seen: Seen
    until: float


@dataclass(frozen=True)
class Ended:
    """The marker turn ended in a way the harvest decides (completed, failed with an
    error, or ended on a thread that is not dead): harvest `turn`, read as `thread`."""

    turn: Turn
    thread: Thread


@dataclass(frozen=True)
class Found:
    """The marker turn shows on the adopted subagent: bind it (turn_started)."""

    turn_id: str
    started_at: int | None = None
    """When the host says the turn started (`Turn.startedAt`)."""


@dataclass(frozen=True)
class Lost:
    """The attempt is lost: session_attempt_lost's judged fields."""

    reason: LostReason
    host_status: str
    turn_status: str
    turn_id: str | None
    """None for a subagent adopted from its thread_started row whose marker turn
    never showed."""


Decision = Wait | Ended | Found | Lost


def judge(
    read: HostRead,
    seen: Seen,
    now: float,
    settings: Settings,
    *,
    turn_id: str | None,
    marker: str | None = None,
    announced: Turn | None = None,
) -> Decision:
    """Judge one read of a bound attempt's thread.

    Args:
        read: the host's answer about the thread.
        seen: what the reads before showed (`Seen()` for the first).
        now: Trio's clock now.
        settings: LostAfter, the polls.
        turn_id: the marker turn's id, or None while it is looked for by `marker`
            (a subagent adopted from a thread_started row).
        announced: the turn as `turn/completed` announced it, or failed with the
            error of the host's `error {willRetry: false}` for it, if either came:
            its status and error are the final ones.
    """
    if isinstance(read, Unreadable):  # ATT-6, ATT-24: not judged, the time kept
        return Wait(replace(seen, recheck=False), now + settings.poll_interval)
    thread = read if isinstance(read, Thread) else None
    turn = _turn(thread, turn_id, marker)
    if turn_id is None and turn is not None:
        return Found(turn.id, turn.startedAt)
    if turn is not None and announced is not None:
        turn = turn.model_copy(update={"status": announced.status, "error": announced.error})
    host_status = thread.status.type if thread is not None else "unknown"
    look: Look = (
        host_status,
        turn.status if turn is not None else None,
        len(turn.items) if turn is not None else 0,
        turn is not None and turn.error is not None,
    )
    if look != seen.look:  # a change restarts the LostAfter time and clears a recheck
        seen = Seen(look, now)
    if thread is not None and turn is not None and _ended(turn, host_status):
        settle = seen.since + settings.interrupted_settle
        if turn.status != "interrupted" or announced is not None or now >= settle:
            return Ended(turn, thread)
        return Wait(seen, settle)
    if host_status not in DEAD:  # ATT-2, ATT-7: an active (or idle) thread is waited for
        return Wait(seen, now + settings.host_poll_interval)
    due = seen.since + settings.lost_after
    reason = _reason(turn, now >= due)
    if reason is None:
        return Wait(seen, min(now + settings.host_poll_interval, due))
    if not seen.recheck:  # ATT-5: read once more before the attempt is declared lost
        return Wait(replace(seen, recheck=True), now + settings.poll_interval)
    return Lost(reason, host_status, _turn_status(thread, turn), turn_id)


def _turn(thread: Thread | None, turn_id: str | None, marker: str | None) -> Turn | None:
    if thread is None:
        return None
    if turn_id is None:
        return find_marker_turn(marker or "", thread)
    return next((turn for turn in thread.turns if turn.id == turn_id), None)


def _ended(turn: Turn, host_status: str) -> bool:
    """Whether the harvest decides the turn: completed (ATT-1), failed or interrupted
    with an error, or ended in any way on a thread that is not dead. A turn that
    ended interrupted, or failed without an error, on a dead thread is the lost
    rule's (ATT-3)."""
    if turn.status == "completed" or turn.error is not None:
        return True
    return turn.status in ("interrupted", "failed") and host_status not in DEAD


def _reason(turn: Turn | None, unchanged: bool) -> LostReason | None:
    """Why an attempt on a dead thread is lost (ATT-3, ATT-4), or None: not yet."""
    if turn is not None and turn.status == "interrupted":
        return "turn_interrupted"
    if turn is not None and turn.status == "failed":
        return "turn_failed_without_error"
    return "turn_unchanged" if unchanged else None


def _turn_status(thread: Thread | None, turn: Turn | None) -> str:
    """The marker turn's status as the host showed it: "unknown" when the host does
    not know the thread, "missing" when the thread shows no such turn."""
    if turn is not None:
        return turn.status
    return "unknown" if thread is None else "missing"


def lost_row(
    call: str, step: StepPublished, agent_id: str | None, lost: Lost
) -> SessionAttemptLost:
    """session_attempt_lost with every field (ATT-8): the step's attempt and k, the
    subagent, the marker turn, and what the host showed."""
    return SessionAttemptLost(
        call=call,
        attempt=step.attempt or 1,
        agent_id=agent_id,
        k=step.k or 1,
        turn_id=lost.turn_id,
        reason=lost.reason,
        host_status=lost.host_status,
        turn_status=lost.turn_status,
    )


@dataclass(frozen=True)
class NextAttempt:
    """The spawn step of the attempt after a lost one (STEP-24), in the same
    allocation (ATT-10): the lost step's turn, run again at its conversation turn,
    naming the turn it replaces, with the repair it carried."""

    k: int
    attempt: int
    conversation_turn: int
    replaces_turn: str | None
    previous_answer_in: str | None
    """The marker of the step row that holds the answer the repair repairs
    (`step_input.holder`): the new step's row names it, and carries no copy."""
    repair_errors: list[str] | None


def after_lost(call: str, step: StepPublished, max_attempts: int) -> NextAttempt | Held:
    """What follows the lost attempt of `step`: the next attempt, or past the
    budget of `max_attempts` the call held attempts_exhausted."""
    attempt = step.attempt or 1
    following = next_attempt(attempt, max_attempts)
    if following is None:
        error = f"attempt {attempt} was lost and the call has {max_attempts} attempts"
        return Held(call=call, reason=ATTEMPTS_EXHAUSTED, error=error, tokens=step.call_tokens)
    k = step.k or 1
    return NextAttempt(
        k=k,
        attempt=following,
        conversation_turn=step.conversation_turn or k,
        replaces_turn=step.marker,
        previous_answer_in=step_input.holder(step),
        repair_errors=step.repair_errors,
    )
