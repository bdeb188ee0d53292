"""The reply to a report about any step but the one its call waits on.

The spec's reply table (session-calls.md, "The step") answers a report from the
rows alone when the step it names is not the call's waiting step: the attempt
ended (close), the turn was bound already (bound again, with no new row, or close
for a second subagent), or the run never published that step (refused without a
subagent, close with one). The call actor asks this while it waits on a later
step, and the inbox asks it for a report no call actor waits for; both read the
same `CallRecord`, folded from the call's rows.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from crw.engine.roles import RolePair

ReplyKind = Literal["bound", "pair_mismatch", "retry", "refused", "close"]

ANSWERED = frozenset({"completed", "null_model"})
"""Terminal rows of a call whose attempt ended answered (DISP-13)."""
ENDED = ANSWERED | {"held", "superseded"}


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
    the subagent each bound turn (attempt, k) ran on.
    """

    ended: str | None = None
    attempt: int = 0
    lost: frozenset[int] = frozenset()
    published: frozenset[tuple[int, int]] = frozenset()
    turns: Mapping[tuple[int, int], str] = field(default_factory=dict)

    def waits_on(self, attempt: int, k: int) -> bool:
        """The step (attempt, k) is published, not bound, and its call goes on with it."""
        return (
            self.ended is None
            and attempt == self.attempt
            and attempt not in self.lost
            and (attempt, k) in self.published
            and (attempt, k) not in self.turns
        )


def call_record(rows: Iterable[Mapping[str, Any]]) -> CallRecord:
    """Fold one call's rows, in journal order, into its record."""
    ended: str | None = None
    attempt = 0
    lost: set[int] = set()
    published: set[tuple[int, int]] = set()
    turns: dict[tuple[int, int], str] = {}
    subagent: str | None = None
    for row in rows:
        kind = row.get("row")
        if kind == "step_published":
            attempt = int(row.get("attempt") or 1)
            published.add((attempt, int(row.get("k") or 1)))
            ended = None
            if row.get("action") == "send_input" and row.get("agent_id"):
                subagent = str(row["agent_id"])
        elif kind == "thread_started":
            subagent = str(row.get("thread_id"))
        elif kind == "turn_started" and subagent is not None:
            turns[(int(row.get("attempt") or 1), int(row.get("k") or 1))] = subagent
        elif kind == "session_attempt_lost":
            lost.add(int(row.get("attempt") or attempt))
        elif kind in ENDED:
            ended = str(kind)
    return CallRecord(ended, attempt, frozenset(lost), frozenset(published), turns)


def decide_late(k: int, attempt: int, agent_id: str | None, record: CallRecord) -> Reply:
    """The reply to a report of step (`k`, `attempt`) naming `agent_id` (None: no
    subagent), when that step is not the one the call waits on.

    A report for a turn already bound to the same subagent is answered bound again
    and writes nothing (DISP-6: the same report answered after a crash, or a late
    report for turn 1 while the repair waits); the subagent the repair needs is never
    told to close.
    """
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
