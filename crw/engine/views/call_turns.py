"""One call's attempts, turns, steps and repairs, from its rows: the middle of the
"one call" view (`crw.engine.views.call_detail`).

Pure: the call's rows in (as `crw.journal.log` reads them, in journal order),
records out. A turn's times and tokens are the timeline's (`timeline_tracks`: a
turn runs from its `turn_started` row to the next row of its call that ends it,
its tokens the call's count after it less before it, when the rows say both);
what ended it is that row, in words (`outcome`). A step is a `step_published` row:
the packet it names (its path and digest; the caller reads the file) and the
input the turn was sent, its previous answer put back (`steps.step_input`). A
repair is a step whose conversation turn is 2: the schema errors of the answer it
repairs (the row's `repair_errors`, else the lines its input names them on), that
answer, and the answer the repair gave when the call completed on it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from crw.engine.steps import step_input
from crw.engine.views.row_lines import row_detail
from crw.engine.views.timeline_tracks import Track, tracks

Row = Mapping[str, Any]

TERMINAL = frozenset({"completed", "null_model", "held", "superseded"})
_ENDS_TURN = frozenset({"step_published", "session_attempt_lost", *TERMINAL})
"""The rows that end the turn before them (`timeline_tracks`)."""
REPAIR_HEAD = "Your final message did not satisfy the output contract:\n"
"""How a repair turn's input begins its list of errors (`packet.repair_text`)."""


@dataclass(frozen=True)
class StepView:
    """A step the run published: the packet and the input the turn was given."""

    k: int
    attempt: int
    marker: str | None
    action: str | None
    """spawn or send_input."""
    published_at: str | None
    published: int
    """How many step_published rows the step has (2: published again after a hold)."""
    conversation_turn: int | None
    repair: bool
    packet: str | None
    """The packet file's path (none: a send_input step, or an App Server call)."""
    packet_digest: str | None
    packet_text: str | None
    """The packet's text as the file holds it now (None: no file, or unreadable)."""
    packet_error: str | None
    """Why the packet's text is not shown, when it names a file."""
    input: str
    """The input the turn was sent, its previous answer put back."""
    input_digest: str | None
    role: str | None
    agent_type: str | None
    model: str | None
    effort: str | None
    workspace: str | None
    agent_id: str | None
    note: str | None


@dataclass(frozen=True)
class TurnView:
    """A turn a subagent (or the call's thread) took."""

    k: int
    attempt: int
    marker: str | None
    conversation_turn: int | None
    repair: bool
    turn_id: str | None
    thread_id: str | None
    started_at: str | None
    """Its turn_started row's time, or the host's start when it reports an earlier one."""
    bound_at: str | None
    """Its turn_started row's time."""
    ended_at: str | None
    """The time of the row that ended it (None: it runs still, as the rows say)."""
    outcome: str
    """What ended it: running, answered, repair (its answer broke the schema),
    lost: REASON, held: REASON, null_model: REASON, superseded by CALL, or next
    step (a step published after it)."""
    interrupt: str | None
    """An interrupt the run asked of it: its reason (and the host's error)."""
    tokens: dict[str, int] | None
    """What the turn counted, by part (None: the rows do not say)."""
    tokens_unmeasured: str | None
    """Why the turn's rollout could not be read, when its tokens are not counted."""


@dataclass(frozen=True)
class ThreadView:
    """A subagent (a session call) or thread (App Server) bound to an attempt."""

    thread_id: str | None
    bound_at: str | None
    model: str | None
    effort: str | None
    cwd: str | None
    host_cwd: str | None
    agent_role: str | None
    rollout_path: str | None
    marker: str | None
    flags: tuple[str, ...]
    """pair_unchecked, effort_unchecked, session_agent_role_mismatch when set."""


@dataclass(frozen=True)
class AttemptView:
    n: int
    started_at: str | None
    ended_at: str | None
    lost: str | None
    """Why the attempt was lost (its reason, host and turn status), or None."""
    threads: tuple[ThreadView, ...]
    steps: tuple[StepView, ...]
    turns: tuple[TurnView, ...]


@dataclass(frozen=True)
class RepairView:
    """A repair turn: the answer that broke the schema, why, and what came back."""

    k: int
    attempt: int
    errors: tuple[str, ...]
    invalid_answer: Any
    """The answer it repairs, as the subagent wrote it."""
    repaired_answer: Any
    """The answer the call completed with on this turn (None: it did not)."""
    outcome: str


def attempts(
    rows: Sequence[Row], packets: Mapping[str, str | OSError], now: datetime | None
) -> tuple[AttemptView, ...]:
    """The call's attempts, each with its threads, steps and turns. `packets`: the
    text of each packet file a step row names (or the error reading it)."""
    folded = tracks(rows, now)
    if not folded.calls or folded.start is None:
        return ()
    track, start = folded.calls[0], folded.start
    turns = _turns(rows, track, start)
    counts: dict[str | None, int] = {}
    steps = []
    for row in rows:
        if row.get("row") == "step_published":
            counts[row.get("marker")] = counts.get(row.get("marker"), 0) + 1
    for row in rows:
        if row.get("row") == "step_published":
            marker = row.get("marker")
            count = counts.pop(marker, 0)
            if count:  # the step's newest row stands for it, at its first row's place
                steps.append(_step(_newest(rows, marker), rows, packets, count))
    ends = [row for row in rows if row.get("row") in TERMINAL or row.get("row") == "decision"]
    open_call = not ends or ends[-1].get("row") == "decision"
    newest = max((attempt.n for attempt in track.attempts), default=0)
    out = []
    for attempt in track.attempts:
        n = attempt.n
        end = _at(start, attempt.end)
        threads = [_thread(row) for row in rows if _is(row, "thread_started", n)]
        lost = next((_lost(row) for row in rows if _is(row, "session_attempt_lost", n)), None)
        out.append(
            AttemptView(
                n=n,
                started_at=_at(start, attempt.start),
                ended_at=None if open_call and not attempt.lost and n == newest else end,
                lost=lost,
                threads=tuple(threads),
                steps=tuple(step for step in steps if step.attempt == n),
                turns=tuple(turn for turn in turns if turn.attempt == n),
            )
        )
    return tuple(out)


def repairs(rows: Sequence[Row], views: Sequence[AttemptView]) -> tuple[RepairView, ...]:
    """Each repair step of the call, with the answer it repairs and what it gave."""
    completed = next((row for row in reversed(rows) if row.get("row") == "completed"), None)
    out = []
    for attempt in views:
        for step in attempt.steps:
            if not step.repair:
                continue
            row = _newest(rows, step.marker)
            errors = row.get("repair_errors")
            listed = tuple(errors) if isinstance(errors, list) else _errors_in(step.input)
            turn = next((t for t in attempt.turns if t.k == step.k), None)
            repaired = None
            if completed is not None and (completed.get("k"), completed.get("attempt")) in (
                (step.k, step.attempt),
                (step.k, None),
            ):
                repaired = completed.get("result")
            out.append(
                RepairView(
                    k=step.k,
                    attempt=step.attempt,
                    errors=tuple(str(error) for error in listed),
                    invalid_answer=step_input.answer_of(row, rows),
                    repaired_answer=repaired,
                    outcome=turn.outcome if turn is not None else "not taken",
                )
            )
    return tuple(out)


def _errors_in(text: str) -> tuple[str, ...]:
    """The schema errors a repair's input lists (`packet.repair_text`)."""
    at = text.find(REPAIR_HEAD)
    if at < 0:
        return ()
    block = text[at + len(REPAIR_HEAD) :].split("\n\n", 1)[0]
    return tuple(line[2:] for line in block.splitlines() if line.startswith("- "))


def _turns(rows: Sequence[Row], track: Track, start: datetime) -> list[TurnView]:
    """The call's turns: each turn_started row with the timeline's turn it made
    (one each, in order) and the row that ended it."""
    bound = [(index, row) for index, row in enumerate(rows) if row.get("row") == "turn_started"]
    threads: dict[int, str | None] = {}
    out = []
    for (index, row), span in zip(bound, track.turns, strict=False):
        attempt = int(row.get("attempt") or 0)
        for earlier in rows[:index]:
            if _is(earlier, "thread_started", attempt):
                threads[attempt] = earlier.get("thread_id")
        ender = next((r for r in rows[index + 1 :] if r.get("row") in _ENDS_TURN), None)
        k = int(row.get("k") or 0)
        interrupt = next(
            (
                r
                for r in rows[index + 1 :]
                if r.get("row") == "interrupt_requested" and r.get("turn_id") == row.get("turn_id")
            ),
            None,
        )
        unmeasured = next(
            (r for r in rows if _is(r, "tokens_unmeasured", attempt) and r.get("k") == k), None
        )
        out.append(
            TurnView(
                k=k,
                attempt=attempt,
                marker=row.get("marker"),
                conversation_turn=row.get("conversation_turn"),
                repair=span.repair,
                turn_id=row.get("turn_id"),
                thread_id=threads.get(attempt),
                started_at=_at(start, span.start),
                bound_at=row.get("at"),
                ended_at=ender.get("at") if ender is not None else None,
                outcome=_outcome(ender, k),
                interrupt=_interrupt(interrupt) if interrupt is not None else None,
                tokens=span.tokens,
                tokens_unmeasured=str(unmeasured.get("error") or "unmeasured")
                if unmeasured is not None
                else None,
            )
        )
    return out


def _outcome(ender: Row | None, k: int) -> str:
    """What ended a turn: the row after it that ends it, in words."""
    if ender is None:
        return "running"
    kind = ender.get("row")
    if kind == "completed":
        return "answered" if ender.get("k") in (None, k) else "completed"
    if kind == "step_published":
        repair = ender.get("repair") or ender.get("conversation_turn") == 2
        return "repair" if repair else "next step"
    if kind == "session_attempt_lost":
        return f"lost: {ender.get('reason') or 'lost'}"
    if kind == "superseded":
        return f"superseded by {ender.get('by') or '-'}"
    return f"{kind}: {ender.get('reason') or kind}"


def _interrupt(row: Row) -> str:
    reason = str(row.get("reason") or "interrupt")
    return f"{reason}: {row['error']}" if row.get("error") else reason


def _step(
    row: Row, rows: Sequence[Row], packets: Mapping[str, str | OSError], count: int
) -> StepView:
    packet = row.get("packet")
    text = packets.get(packet) if isinstance(packet, str) else None
    previous = step_input.answer_of(row, rows)
    return StepView(
        k=int(row.get("k") or 0),
        attempt=int(row.get("attempt") or 0),
        marker=row.get("marker"),
        action=row.get("action"),
        published_at=row.get("at"),
        published=count,
        conversation_turn=row.get("conversation_turn"),
        repair=bool(row.get("repair") or row.get("conversation_turn") == 2),
        packet=packet if isinstance(packet, str) else None,
        packet_digest=row.get("packet_digest"),
        packet_text=text if isinstance(text, str) else None,
        packet_error=str(text) if isinstance(text, OSError) else None,
        input=step_input.full(row.get("input"), previous, row.get("input_answer_at")),
        input_digest=row.get("input_digest"),
        role=row.get("role"),
        agent_type=row.get("agent_type"),
        model=row.get("model"),
        effort=row.get("effort"),
        workspace=row.get("workspace"),
        agent_id=row.get("agent_id"),
        note=row.get("note"),
    )


def _thread(row: Row) -> ThreadView:
    flags = ("pair_unchecked", "effort_unchecked", "session_agent_role_mismatch")
    return ThreadView(
        thread_id=row.get("thread_id"),
        bound_at=row.get("at"),
        model=row.get("model"),
        effort=row.get("effort"),
        cwd=row.get("cwd"),
        host_cwd=row.get("host_cwd"),
        agent_role=row.get("agent_role"),
        rollout_path=row.get("rollout_path"),
        marker=row.get("marker"),
        flags=tuple(flag for flag in flags if row.get(flag)),
    )


def _lost(row: Row) -> str:
    return row_detail(row)


def _is(row: Row, kind: str, attempt: int) -> bool:
    return row.get("row") == kind and int(row.get("attempt") or 0) == attempt


def _newest(rows: Sequence[Row], marker: object) -> Row:
    return next(
        row
        for row in reversed(rows)
        if row.get("row") == "step_published" and row.get("marker") == marker
    )


def _at(start: datetime, seconds: float | None) -> str | None:
    """A time the timeline gives in seconds from the call's first row, as a row's `at`."""
    if seconds is None:
        return None
    stamp = (start + timedelta(seconds=seconds)).astimezone(UTC)
    return stamp.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
