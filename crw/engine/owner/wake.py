"""Waking the owner thread while steps wait: the decisions, over plain data.

The wake scheduler (`crw.actors.wake`) feeds this module the rows its calls
commit and Trio's clock; it answers which steps wait, when the owner is to be
woken, renotified or escalated about, and under which logical id. It does no
I/O: the actor stages, writes rows and talks to the host.

- A step waits from its step_published row until its turn is bound
  (turn_started: the owner took it) or its call stops waiting on it (its
  attempt lost, the call ended).
- A publication wakes an owner that is idle or notLoaded (WAKE-1); a busy one
  is left to its turn.
- While steps wait without a bind (a dispatched report, or a spawn the marker
  lookup found), the run notifies again after WakeAfter, each interval twice the
  one before up to RenotifyMax, whatever the owner's status (WAKE-9..11); after
  UnresponsiveAfter it escalates once and goes on waiting (WAKE-12). A bind
  starts the count again; no step waiting stops it.
- The logical id is (run, process, batch): `run:<run>/<batch>`, the run's n-th
  process under `<batch>/e<n>` (WAKE-5, WAKE-6), and the m-th renotification of
  the batch under `.../r<m>`: each process counts its renotifications from 0
  again (WAKE-14), so its ids are its own.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from crw.host.protocol import Thread, UserMessage
from crw.settings import Settings

WAKE_STATUSES = frozenset({"idle", "notLoaded"})
"""The owner statuses a publication wakes (WAKE-1)."""
MESSAGE = "session_step_waiting"
WAKE_LINE = "crw-flow-wake:"
"""The first line of a wake's text names its logical id, so the owner's turns
show which wake each one delivered."""
ALREADY_HELD = "already_held"
"""The relay's reason for a wake whose logical id it holds already (WAKE-7)."""
_ENDS = frozenset({"completed", "null_model", "held", "superseded", "session_attempt_lost"})


@dataclass(frozen=True)
class Waiting:
    """The run's waiting steps (call → op) and how many publications and binds
    the scheduler was told of."""

    steps: Mapping[str, str] = field(default_factory=dict)
    published: int = 0
    binds: int = 0

    @property
    def ops(self) -> list[str]:
        return sorted(self.steps.values())


def fold(waiting: Waiting, rows: Iterable[Mapping[str, Any]]) -> Waiting:
    """`waiting` after the calls committed `rows` (journal order)."""
    steps = dict(waiting.steps)
    published, binds = waiting.published, waiting.binds
    for row in rows:
        call, kind = row.get("call"), row.get("row")
        if not isinstance(call, str):
            continue
        if kind == "step_published":
            steps[call] = str(row.get("op") or call)
            published += 1
        elif kind == "turn_started" and steps.pop(call, None) is not None:
            binds += 1
        elif kind in _ENDS:
            steps.pop(call, None)
    if (published, binds) == (waiting.published, waiting.binds) and steps == waiting.steps:
        return waiting
    return Waiting(steps, published, binds)


def process_number(rows: Iterable[Mapping[str, Any]]) -> int:
    """This process's place among the run's processes: its started rows (its own
    committed) counted."""
    return max(1, sum(1 for row in rows if row.get("row") == "started"))


def batch_of(ops: Iterable[str]) -> str:
    """The batch of a set of waiting steps: one name for the same set."""
    digest = hashlib.sha256("\n".join(sorted(set(ops))).encode()).hexdigest()
    return f"b-{digest[:12]}"


def wake_id(run_id: str, batch: str, process: int, renotify: int) -> str:
    """The logical id: `run:<run>/<batch>`, `/e<n>` for the n-th process (n > 1),
    `/r<m>` for the m-th renotification (m > 0)."""
    wid = f"run:{run_id}/{batch}"
    if process > 1:
        wid += f"/e{process}"
    return wid + (f"/r{renotify}" if renotify else "")


def wake_text(wid: str, run_id: str, ops: list[str]) -> str:
    """The session_step_waiting message the owner's turn gets."""
    steps = "step" if len(ops) == 1 else "steps"
    return (
        f"{WAKE_LINE} {wid}\n"
        f"{MESSAGE}: run {run_id} has {len(ops)} {steps} waiting for you: "
        f"{', '.join(ops)}.\n"
        f"Take them with: crw flow next {run_id} --json\n"
    )


def unsettled(rows: Iterable[Mapping[str, Any]]) -> list[str]:
    """The wakes an earlier process staged whose delivery no row records (it died
    between its session_wake row and its message_delivery row)."""
    rows = list(rows)
    done = {row.get("wake_id") for row in rows if row.get("row") == "message_delivery"}
    return [
        str(row["wake_id"])
        for row in rows
        if row.get("row") == "session_wake" and row.get("staged") and row["wake_id"] not in done
    ]


def delivered(wake_ids: Iterable[str], owner: Thread) -> dict[str, str]:
    """Of `wake_ids`, those a turn of the owner thread carries: the turn's id, by
    wake (the first line of the turn's first user message names it)."""
    wanted = set(wake_ids)
    found: dict[str, str] = {}
    for turn in owner.turns:
        first = next((i for i in turn.items if isinstance(i, UserMessage)), None)
        line = (first.first_text() or "").split("\n", 1)[0] if first is not None else ""
        head, _, wid = line.partition(" ")
        if head == WAKE_LINE and wid in wanted:
            found.setdefault(wid, turn.id)
    return found


@dataclass(frozen=True)
class Wake:
    """A wake to stage: the session_wake row's fields but the owner's."""

    batch: str
    wake_id: str
    renotify: int
    ops: list[str]
    waiting_seconds: float


@dataclass(frozen=True)
class Escalate:
    """The session_unresponsive escalation's fields but the owner's."""

    batch: str
    ops: list[str]
    waiting_seconds: float


@dataclass(frozen=True)
class Timers:
    wake_after: float
    renotify_max: float
    unresponsive_after: float

    @classmethod
    def of(cls, settings: Settings) -> Timers:
        return cls(settings.wake_after, settings.renotify_max, settings.unresponsive_after)


@dataclass(frozen=True)
class Quiet:
    """A stretch of waiting without a bind: since when, the renotifications made,
    the next one's time, and whether it was escalated."""

    since: float
    renotify: int
    next_at: float
    escalated: bool = False


@dataclass
class WakePlan:
    """One process's wake decisions; `now` is always Trio's clock, given."""

    run_id: str
    process: int
    timers: Timers
    seen: Waiting = field(default_factory=Waiting)
    quiet: Quiet | None = None

    def observe(self, waiting: Waiting, now: float) -> bool:
        """Take the calls' newest `waiting`; True when a step was published since
        the last one and steps wait (a publication wake is to be judged)."""
        published = waiting.published > self.seen.published
        bound = waiting.binds > self.seen.binds
        self.seen = waiting
        if not waiting.steps:
            self.quiet = None
        elif self.quiet is None or bound:  # the owner took a step: count again
            self.quiet = Quiet(since=now, renotify=0, next_at=now + self.timers.wake_after)
        return published and bool(waiting.steps)

    def publication(self, owner_status: str, now: float) -> Wake | None:
        """The wake of a publication: only an idle or notLoaded owner gets one."""
        if owner_status not in WAKE_STATUSES or self.quiet is None:
            return None
        return self._wake(0, now)

    def due(self, now: float) -> list[Wake | Escalate]:
        """The renotification and the escalation due at `now`, in time order."""
        quiet = self.quiet
        if quiet is None:
            return []
        events: list[tuple[float, str]] = []
        escalate_at = quiet.since + self.timers.unresponsive_after
        if not quiet.escalated and now >= escalate_at:
            events.append((escalate_at, "escalate"))
        if now >= quiet.next_at:
            events.append((quiet.next_at, "wake"))
        out: list[Wake | Escalate] = []
        for _, what in sorted(events):
            out.append(self._escalate(now) if what == "escalate" else self._renotify(now))
        return out

    def _renotify(self, now: float) -> Wake:
        assert self.quiet is not None
        renotify = self.quiet.renotify + 1
        interval = min(self.timers.wake_after * 2**renotify, self.timers.renotify_max)
        wake = self._wake(renotify, now)
        self.quiet = replace(self.quiet, renotify=renotify, next_at=self.quiet.next_at + interval)
        return wake

    def deadline(self) -> float:
        """When `due` has something next (inf: nothing waits)."""
        quiet = self.quiet
        if quiet is None:
            return float("inf")
        if quiet.escalated:
            return quiet.next_at
        return min(quiet.next_at, quiet.since + self.timers.unresponsive_after)

    def _wake(self, renotify: int, now: float) -> Wake:
        assert self.quiet is not None
        ops = self.seen.ops
        batch = batch_of(ops)
        return Wake(
            batch=batch,
            wake_id=wake_id(self.run_id, batch, self.process, renotify),
            renotify=renotify,
            ops=ops,
            waiting_seconds=now - self.quiet.since,
        )

    def _escalate(self, now: float) -> Escalate:
        assert self.quiet is not None
        self.quiet = replace(self.quiet, escalated=True)
        ops = self.seen.ops
        return Escalate(batch=batch_of(ops), ops=ops, waiting_seconds=now - self.quiet.since)
