"""The reply to a report about any step but the one its call waits on.

The spec's reply table (session-calls.md, "The step") answers a report from the
rows alone when the step it names is not the call's waiting step: the attempt
ended (close), the turn was bound already (bound again, with no new row, or close
for a second subagent), or the run never published that step (refused without a
subagent, close with one). A close for a subagent the call never bound waits
for the host's snapshot of it: one whose first message names another run's packet
is that run's, and is refused (`decide_late`). The call actor asks this while it
waits on a later step, and the inbox asks it for a report no call actor waits for;
both read the same `CallRecord`, folded from the call's rows.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from crw.engine.config.roles import RolePair
from crw.engine.steps.step_match import other_run
from crw.host.protocol import Thread

ReplyKind = Literal["bound", "pair_mismatch", "retry", "refused", "close", "held"]

ANSWERED = frozenset({"completed", "null_model"})
"""Terminal rows of a call whose attempt ended answered (DISP-13)."""
ENDED = ANSWERED | {"held", "superseded"}
ALREADY_ANSWERED = "already bound by its marker and answered; close it"
"""The close reason of a report of the subagent the call bound and was answered by
(DISP-13): the run found it by its marker before the report came. Nothing is wrong;
the reply still exits 1, as every reply but bound does (CMD-DISP-6)."""


@dataclass(frozen=True)
class Reply:
    """An answer that writes no row. `pair` is the role's pair of a pair_mismatch."""

    kind: ReplyKind
    reason: str
    pair: RolePair | None = None


@dataclass(frozen=True)
class CallRecord:
    """What one call's rows say of its steps and binds.

    `ended`: the terminal row's kind while the call has one. `attempt`: the newest
    attempt a step_published row names. `lost`: the attempts a session_attempt_lost
    row ended. `published`: the (attempt, k) of every step_published row. `turns`:
    the subagent each bound turn (attempt, k) ran on. `agents`: every subagent a
    thread_started row of the call names (the ones this run bound). `warned`: the
    ops a session_host_warning row of the call records several_spawns for.
    """

    ended: str | None = None
    attempt: int = 0
    lost: frozenset[int] = frozenset()
    published: frozenset[tuple[int, int]] = frozenset()
    turns: Mapping[tuple[int, int], str] = field(default_factory=dict)
    agents: frozenset[str] = frozenset()
    warned: frozenset[str] = frozenset()

    def waits_on(self, attempt: int, k: int) -> bool:
        """The step (attempt, k) is published, not bound, and its call goes on with it."""
        return (
            self.ended is None
            and attempt == self.attempt
            and attempt not in self.lost
            and (attempt, k) in self.published
            and (attempt, k) not in self.turns
        )


@dataclass
class _Fold:
    """One call's record as its rows come, in journal order."""

    ended: str | None = None
    attempt: int = 0
    lost: set[int] = field(default_factory=set)
    published: set[tuple[int, int]] = field(default_factory=set)
    turns: dict[tuple[int, int], str] = field(default_factory=dict)
    subagent: str | None = None
    agents: set[str] = field(default_factory=set)
    warned: set[str] = field(default_factory=set)

    def add(self, row: Mapping[str, Any]) -> None:
        kind = row.get("row")
        if kind == "step_published":
            self.attempt = int(row.get("attempt") or 1)
            self.published.add((self.attempt, int(row.get("k") or 1)))
            self.ended = None
            if row.get("action") == "send_input" and row.get("agent_id"):
                self.subagent = str(row["agent_id"])
        elif kind == "thread_started":
            self.subagent = str(row.get("thread_id"))
            self.agents.add(self.subagent)
        elif kind == "turn_started" and self.subagent is not None:
            self.turns[(int(row.get("attempt") or 1), int(row.get("k") or 1))] = self.subagent
        elif kind == "session_attempt_lost":
            self.lost.add(int(row.get("attempt") or self.attempt))
        elif kind in ENDED:
            self.ended = str(kind)
        elif kind == "decision" and row.get("choice") == "retry":
            self.ended = None  # the held call goes on in place with its step
        elif kind == "session_host_warning" and "several_spawns" in (row.get("warnings") or ()):
            self.warned.add(str(row.get("op")))

    def record(self) -> CallRecord:
        return CallRecord(
            self.ended,
            self.attempt,
            frozenset(self.lost),
            frozenset(self.published),
            dict(self.turns),
            frozenset(self.agents),
            frozenset(self.warned),
        )


def call_record(rows: Iterable[Mapping[str, Any]]) -> CallRecord:
    """Fold one call's rows, in journal order, into its record."""
    fold = _Fold()
    for row in rows:
        fold.add(row)
    return fold.record()


class CallRecords:
    """Every call's record, kept up to date as the run commits rows: the inbox
    answers a report no call actor waits for from it, reading no journal."""

    def __init__(self, rows: Iterable[Mapping[str, Any]] = ()) -> None:
        self._folds: dict[str, _Fold] = {}
        self.folded = 0
        """Rows folded so far (tests assert each row is folded once)."""
        self.add(rows)

    def add(self, rows: Iterable[Mapping[str, Any]]) -> None:
        """Fold rows the journal holds now, in journal order, each once."""
        for row in rows:
            call = row.get("call")
            if isinstance(call, str):
                self._folds.setdefault(call, _Fold()).add(row)
                self.folded += 1

    def record(self, call: str) -> CallRecord:
        """The call's record (an empty one for a call with no row)."""
        fold = self._folds.get(call)
        return fold.record() if fold is not None else CallRecord()

    def any_ended(self) -> bool:
        """Whether a call has its terminal row (and has not gone on since)."""
        return any(fold.ended is not None for fold in self._folds.values())


def reads_host(agent_id: str | None, record: CallRecord, failed: str | None = None) -> bool:
    """Whether the late reply to a report naming `agent_id` needs the host's snapshot
    of that subagent: the call never bound it, so the run's rows would answer close,
    and it may be another run's (`decide_late`)."""
    return failed is None and agent_id is not None and agent_id not in record.agents


def decide_late(
    k: int,
    attempt: int,
    agent_id: str | None,
    record: CallRecord,
    failed: str | None = None,
    *,
    run: str = "",
    thread: Thread | None = None,
    host_error: str | None = None,
) -> Reply:
    """The reply to a report of step (`k`, `attempt`) naming `agent_id` (None: no
    subagent), when that step is not the one the call waits on. A report of a
    failed spawn (`failed`, the host's message) is refused: it holds only the step
    its call waits on (`late_failed`).

    A report for a turn already bound to the same subagent is answered bound again
    and writes nothing (DISP-6: the same report answered after a crash, or a late
    report for turn 1 while the repair waits); the subagent the repair needs is never
    told to close.

    A subagent the call never bound (`reads_host`) is told to close only when it is
    not another run's: `thread` is the host's snapshot of it (None: not read, or the
    host has no such thread), `host_error` why the host could not answer now (retry);
    one whose first message names a packet of a run other than `run` is refused
    naming that run (DISP-10: an owner that obeyed would close that run's subagent).
    """
    reply = _late_rows(k, attempt, agent_id, record, failed)
    if reply.kind != "close" or not reads_host(agent_id, record, failed):
        return reply
    if host_error is not None:
        return Reply("retry", f"the host cannot be read yet: {host_error}")  # DISP-9
    another = other_run(thread, run) if thread is not None else None
    return Reply("refused", another) if another is not None else reply


def _late_rows(
    k: int, attempt: int, agent_id: str | None, record: CallRecord, failed: str | None
) -> Reply:
    """`decide_late` from the rows alone."""
    if failed is not None:
        return Reply("refused", late_failed(k, attempt, record))
    if record.ended in ANSWERED and _answered_by(k, attempt, agent_id, record):
        return Reply("close", ALREADY_ANSWERED)  # DISP-13: the step's own subagent
    if record.ended is not None:
        why = "answered" if record.ended in ANSWERED else record.ended
        return Reply("close", f"an attempt that ended ({why})")  # DISP-13
    if attempt in record.lost or attempt < record.attempt:
        return Reply("close", "an attempt that ended (lost)")  # DISP-14
    bound = record.turns.get((attempt, k))
    if bound is not None:
        if agent_id in (None, bound):
            return Reply("bound", "already bound")  # DISP-6: its rows are written, once
        return Reply("close", "a second subagent for a bound attempt")  # DISP-16
    if agent_id is None:
        return Reply("refused", "a report without a subagent for a step the run did not publish")
    return Reply("close", "a step the run did not publish (an early report)")  # DISP-15


def _answered_by(k: int, attempt: int, agent_id: str | None, record: CallRecord) -> bool:
    """Whether `agent_id` is the subagent the call bound to step (`k`, `attempt`) of
    the attempt that answered it (not a lost one's)."""
    return (
        agent_id is not None
        and attempt == record.attempt
        and attempt not in record.lost
        and record.turns.get((attempt, k)) == agent_id
    )


def late_failed(k: int, attempt: int, record: CallRecord) -> str:
    """Why a report of a failed spawn of step (`k`, `attempt`) holds nothing: the
    step is not the one its call waits on. The reason says what to do instead."""
    if record.ended == "held":
        return (
            "the call is held already (a failed spawn is reported once): answer it as "
            "crw flow next or crw flow status shows"
        )
    if record.ended is not None:
        return f"the call has ended ({record.ended}): there is nothing to report"
    if (attempt, k) in record.turns:
        return f"its turn is bound to {record.turns[(attempt, k)]}: that spawn did not fail"
    if attempt in record.lost or attempt < record.attempt or (attempt, k) in record.published:
        return (
            f"attempt {attempt} turn {k} is not the step the call waits on: "
            "report the step crw flow next shows"
        )
    return (
        "a report of a failed spawn for a step the run did not publish: "
        "report the step crw flow next shows"
    )
