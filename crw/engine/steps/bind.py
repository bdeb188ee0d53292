"""The bind decision: a dispatch report, or a marker found on the host, in; a reply out.

The spec (session-calls.md, the reply table and the paragraphs after it) decides
when the run binds a subagent to a published step and what it answers the owner:
`bound`, `pair_mismatch`, `retry`, `refused` or `close`. Everything here is a pure
function of rows-derived data (the published step, the attempt's state, the role's
pair) and host snapshots (`crw.host.protocol.Thread`), so the same report answered
again after a crash gets the same reply and writes no second row.

Whether a marker turn carries the step (`carries_step`) is decided here; which of
the owner's subagents a never-reported spawn bound, and which are strays, is the
marker lookup's (DISP-25, DISP-26: `crw.engine.steps.lookup`). A report about any
other step than the one the call waits on is answered from the rows alone
(`crw.engine.steps.replies`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from crw.engine.config.roles import RolePair
from crw.engine.held_fix import SPAWN_FAILED
from crw.engine.steps.replies import CallRecord as CallRecord
from crw.engine.steps.replies import Reply as Reply
from crw.engine.steps.replies import ReplyKind as ReplyKind
from crw.engine.steps.replies import decide_late
from crw.engine.steps.step_match import (
    carries,
    first_message,
    not_the_steps,
    other_run,
    thread_carries,
)
from crw.engine.steps.step_match import find_marker_turn as find_marker_turn
from crw.engine.steps.step_match import marker_of as marker_of
from crw.engine.steps.step_match import spawn_marker as spawn_marker
from crw.engine.steps.step_match import turn_marker as turn_marker
from crw.host.protocol import Thread, Turn
from crw.journal.rows import Held, StepAction, StepPublished, ThreadStarted, TurnStarted

MAX_RETRIES = 5
"""How many times one report (its call, k, attempt and subagent) is answered
retry; the next time the reply is refused with why and what to do."""

PAIR_UNCHECKED = "pair_unchecked"
EFFORT_UNCHECKED = "effort_unchecked"
SESSION_AGENT_ROLE_MISMATCH = "session_agent_role_mismatch"


class ReportLike(Protocol):
    """What the decision reads of a dispatch report: `crw.bus.inbox.Report`, or
    `Report` below; `agent_id` None is a report without a subagent."""

    @property
    def run(self) -> str: ...
    @property
    def call(self) -> str: ...
    @property
    def k(self) -> int: ...
    @property
    def attempt(self) -> int: ...
    @property
    def agent_id(self) -> str | None: ...
    @property
    def failed(self) -> str | None: ...


@dataclass(frozen=True)
class Report:
    """A dispatch report's members the decision reads, as plain data."""

    id: str
    run: str
    call: str
    k: int
    attempt: int
    agent_id: str | None = None
    failed: str | None = None


@dataclass(frozen=True)
class PublishedStep:
    """A step the run published (its step_published row). `agent_id` is the bound
    subagent of a send_input step, None for a spawn; `workspace` is P. `run` is the
    run's id as its directory is named, which the packets its spawn messages name
    are under, and `packet` a spawn step's packet (None for a send_input): a
    subagent is the step's only when its first message names them
    (`crw.engine.steps.step_match`)."""

    call: str
    k: int
    attempt: int
    op: str
    marker: str
    role: str
    action: StepAction
    agent_id: str | None
    workspace: str
    run: str
    packet: str | None
    conversation_turn: int | None = None
    replaces_turn: int | str | None = None


@dataclass(frozen=True)
class AttemptState:
    """What the rows say of the waiting step's attempt.

    `thread_id`: the subagent its thread_started row bound, if any. `prior_pairs`:
    the `{model, effort}` pairs the call's earlier attempts were bound with, in
    attempt order.
    """

    thread_id: str | None = None
    prior_pairs: tuple[Mapping[str, Any], ...] = ()


@dataclass(frozen=True)
class Bound:
    """The subagent (or, for a send_input step, its turn) is the step's: the rows to
    commit in one batch (BIND-6), `thread_started` None for a send_input (BIND-7)."""

    kind: ClassVar[ReplyKind] = "bound"
    reason: ClassVar[str] = "the subagent is the step's"

    thread_started: ThreadStarted | None
    turn_started: TurnStarted
    warnings: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class SpawnFailed:
    """The host refused the spawn of the step the call waits on: the call ends
    `held` (spawn_failed, the host's message as its error), its step is retracted
    and the report is answered held with what to do."""

    kind: ClassVar[ReplyKind] = "held"

    held: Held
    reason: str


Decision = Bound | SpawnFailed | Reply


def reply_pair(pair: RolePair) -> dict[str, str | None]:
    """The `pair` member of a pair_mismatch reply file."""
    return {"agent_type": pair.agent_type, "model": pair.model, "reasoning_effort": pair.effort}


def decide_report(
    run_id: str,
    owner: str,
    report: ReportLike,
    step: PublishedStep,
    record: CallRecord,
    attempt: AttemptState,
    pair: RolePair,
    thread: Thread | None,
    host_error: str | None,
    *,
    unknown: bool = False,
    retries: int = 0,
) -> Decision:
    """The run's answer to a dispatch report, while the call waits on `step`.

    Args:
        run_id: this run's id.
        owner: the owner thread's id.
        report: the report read from the inbox.
        step: the published step the call waits on.
        record: the rows' record of `step`'s call, for a report that names
            another step (`crw.engine.steps.replies.decide_late`).
        attempt: the rows' state of the step's attempt.
        pair: the pair of the step's role, as the run pinned it.
        thread: the host's snapshot, with turns, of the report's subagent (of the
            step's subagent for a report without one), or None when not read; for
            a report of another step, read when `replies.reads_host` says.
        host_error: why the host could not answer now, if it could not.
        unknown: the host answered that it has no such thread.
        retries: how many times this report's step and subagent were answered
            retry before.

    Raises:
        ValueError: `thread` is not the subagent the report names.
    """
    if report.run != run_id:
        return Reply("refused", "another run")  # DISP-10
    if (report.call, report.k, report.attempt) != (step.call, step.k, step.attempt):
        late = record if report.call == step.call else CallRecord()
        return decide_late(
            report.k,
            report.attempt,
            report.agent_id,
            late,
            report.failed,
            run=step.run,
            thread=thread,
            host_error=host_error,
        )
    if report.failed is not None:
        return decide_failed(step, attempt, report.failed)
    agent = report.agent_id if report.agent_id is not None else step.agent_id
    return decide_bind(
        owner, step, attempt, pair, agent, thread, host_error, unknown=unknown, retries=retries
    )


def decide_failed(step: PublishedStep, attempt: AttemptState, failed: str) -> Decision:
    """A report that the host refused the spawn of the waiting `step`, with its tool
    output `failed`: the call is held spawn_failed. A send_input step, or a spawn
    step a subagent is bound to already, is refused: its spawn did not fail."""
    if step.action != "spawn":
        return Reply(
            "refused",
            f"step {step.marker} is a send_input to {step.agent_id}, not a spawn: "
            "report what it dispatched with --agent",
        )
    if attempt.thread_id is not None:
        return Reply("refused", f"its turn is bound to {attempt.thread_id}: its spawn did not fail")
    held = Held(call=step.call, reason=SPAWN_FAILED, error=failed)
    return SpawnFailed(held, f"{SPAWN_FAILED}: {failed}")


def decide_bind(
    owner: str,
    step: PublishedStep,
    attempt: AttemptState,
    pair: RolePair,
    agent_id: str | None,
    thread: Thread | None,
    host_error: str | None = None,
    *,
    unknown: bool = False,
    retries: int = 0,
) -> Decision:
    """Whether `agent_id` (read as `thread`) binds to the published `step`.

    The part of `decide_report` after the report is matched to its step; the
    marker lookup (DISP-25, DISP-26) calls it with the thread it found. `agent_id`
    None means "the subagent `thread` is", or not known yet.

    Raises:
        ValueError: `thread` is not `agent_id`'s.
    """
    decided = owners_subagent(
        owner, step, attempt, agent_id, thread, host_error,
        unknown=unknown, retries=retries, report="the agent_id spawn_agent answered",
    )  # fmt: skip
    if decided is not None:
        return decided
    assert thread is not None  # owners_subagent decides a thread not read
    another = other_run(thread, step.run)
    if another is not None:
        return Reply("refused", another)  # DISP-10: the subagent is another run's
    turn = find_marker_turn(step.marker, thread)
    if turn is None:
        give_up = _MARKER_GIVE_UP.format(marker=step.marker)
        return _retry("the marker turn cannot be read yet", retries, give_up)  # DISP-4, DISP-9
    if not carries_step(step, thread, turn):
        return Reply("refused", not_the_steps(step.run, step.marker))
    turn_started = marker_turn_started(step, turn)
    if step.action == "send_input":
        return Bound(None, turn_started)  # BIND-7: the subagent's pair was checked at its bind
    return bind_spawn(step, attempt, pair, thread, turn_started)


def owners_subagent(
    owner: str,
    step: PublishedStep,
    attempt: AttemptState,
    agent_id: str | None,
    thread: Thread | None,
    host_error: str | None,
    *,
    unknown: bool,
    retries: int,
    report: str,
    host_give_up: str = "",
) -> Decision | None:
    """The checks every bind makes before it looks at the step's turn, by whatever
    protocol the subagent was spawned: a second subagent for a bound attempt, a
    thread the host does not know (`report`: what the owner should report
    instead), a host not read yet (`host_give_up`: what the owner is told once it
    reported too often; the marker's words by default), a thread that is not the
    owner's subagent.
    None: `thread` is read and is the owner's subagent; the caller goes on.

    Raises:
        ValueError: `thread` is not `agent_id`'s.
    """
    if agent_id is not None and thread is not None and thread.id != agent_id:
        raise ValueError(f"the host snapshot is thread {thread.id}, not {agent_id}")
    bound_to = attempt.thread_id or (step.agent_id if step.action == "send_input" else None)
    agent = agent_id if agent_id is not None else (thread.id if thread is not None else None)
    if bound_to is not None and agent is not None and agent != bound_to:
        return Reply("close", "a second subagent for a bound attempt")  # DISP-16
    if unknown:
        return Reply("refused", f"the host has no thread {agent}: report {report}")
    if host_error is not None or thread is None:
        why = f": {host_error}" if host_error else ""
        give_up = host_give_up or _HOST_GIVE_UP
        return _retry(f"the host cannot be read yet{why}", retries, give_up)  # DISP-9
    if thread.parentThreadId != owner:
        return Reply("refused", "not a subagent of the owner thread")  # DISP-3, DISP-12
    return None


_HOST_GIVE_UP = (
    "stop reporting it: the run binds the subagent by its marker once the host answers "
    "(crw flow next shows the step while it waits)"
)
_MARKER_GIVE_UP = (
    "stop reporting it: the run binds it by its marker once its turn shows; if its "
    "message did not start with crw-flow-op: {marker}, close it and spawn again with "
    "the step's message"
)


def _retry(reason: str, retries: int, give_up: str) -> Reply:
    """retry, or once the same report was answered retry MAX_RETRIES times, refused
    with why and what to do."""
    if retries < MAX_RETRIES:
        return Reply("retry", reason)
    return Reply("refused", f"{reason} (answered retry {retries} times): {give_up}")


def bind_spawn(
    step: PublishedStep,
    attempt: AttemptState,
    pair: RolePair,
    thread: Thread,
    turn_started: TurnStarted,
    *,
    agent_role: bool = True,
) -> Decision:
    """A spawned subagent's pair checked and its bind decided; `agent_role`: its
    thread names the agent type it was spawned as (multi-agent v1; v2 names none)."""
    mismatch = pair_mismatch(pair, thread)
    if mismatch is not None:
        return mismatch
    warnings: list[str] = []
    if pair.model is None:
        warnings.append(PAIR_UNCHECKED)  # DISP-17
    elif pair.effort is None:
        warnings.append(EFFORT_UNCHECKED)  # DISP-19, DISP-20
    if agent_role and thread.agentRole != pair.agent_type:
        warnings.append(SESSION_AGENT_ROLE_MISMATCH)  # DISP-18: recorded, and bound
    return Bound(_thread_started(step, attempt, thread, warnings), turn_started, warnings)


def pair_mismatch(pair: RolePair, thread: Thread) -> Reply | None:
    """DISP-5, DISP-7: only the decided parts of the role's pair are compared."""
    if pair.model is None:
        return None
    if pair.model == thread.model and pair.effort in (None, thread.reasoningEffort):
        return None
    runs = f"{thread.model} with effort {thread.reasoningEffort}"
    wants = pair.model if pair.effort is None else f"{pair.model} with effort {pair.effort}"
    return Reply(
        "pair_mismatch",
        f"the subagent runs another pair ({runs}; the role's is {wants}): "
        "close it and spawn again with the role's pair",
        pair,
    )


def _thread_started(
    step: PublishedStep, attempt: AttemptState, thread: Thread, warnings: list[str]
) -> ThreadStarted:
    """BIND-1..3. `cwd` is P; the host's cwd is recorded as host_cwd only (STEP-7)."""
    return ThreadStarted(
        call=step.call,
        thread_id=thread.id,
        model=thread.model,
        effort=thread.reasoningEffort,
        cwd=step.workspace,
        host_cwd=thread.cwd,
        parent_thread_id=thread.parentThreadId,
        agent_role=thread.agentRole,
        attempt=step.attempt,
        via="session",
        rollout_path=thread.path,
        marker=step.marker,
        prior_pairs=_prior_pairs(attempt.prior_pairs, thread) or None,
        pair_unchecked=(PAIR_UNCHECKED in warnings) or None,
        effort_unchecked=(EFFORT_UNCHECKED in warnings) or None,
        session_agent_role_mismatch=(SESSION_AGENT_ROLE_MISMATCH in warnings) or None,
    )


def _prior_pairs(prior: Iterable[Mapping[str, Any]], thread: Thread) -> list[dict[str, Any]]:
    """BIND-3: the earlier attempts' pairs that differ from the one bound now, each
    once, in the order the attempts ran."""
    now = (thread.model, thread.reasoningEffort)
    seen: list[tuple[Any, Any]] = []
    for earlier in prior:
        key = (earlier.get("model"), earlier.get("effort"))
        if key != now and key not in seen:
            seen.append(key)
    return [{"model": model, "effort": effort} for model, effort in seen]


def marker_turn_started(step: PublishedStep | StepPublished, turn: Turn) -> TurnStarted:
    """BIND-5: the marker turn at the step's place in the conversation (the step as
    the bind reads it, or its step_published row)."""
    return TurnStarted(
        call=step.call,
        k=step.k,
        op=step.op,
        turn_id=turn.id,
        attempt=step.attempt,
        marker=step.marker,
        conversation_turn=step.conversation_turn,
        replaces_turn=step.replaces_turn,
        host_started_at=turn.startedAt,
    )


def carries_step(step: PublishedStep, thread: Thread, turn: Turn) -> bool:
    """Whether the marker `turn` of `thread` is the step's: a spawn's message names
    the step's packet, and a send_input's subagent was spawned with a packet of the
    run (`crw.engine.steps.step_match`). The marker alone never tells."""
    if step.action == "spawn":
        return carries(first_message(turn), step.run, step.packet)
    return thread_carries(thread, step.run, None)
