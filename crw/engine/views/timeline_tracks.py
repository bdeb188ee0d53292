"""A run's rows as time: each call's span, attempts, turns and marks, and the
run's own marks (a process started, paused, ended).

Pure: rows in (as `crw.journal.log` reads them, in journal order), tracks out;
`crw.engine.views.timeline` lays them out. The fold over the rows (`TrackFold`)
goes on from where it was left and is kept as plain values (`TrackFold.values`,
`TrackFold.of`), so a reader keeps it beside the journal and folds only the rows
appended since (`crw.cli.read.timeline_read`): the tracks it gives are those of
all the rows, to the byte. Times are seconds from the run's first row.
A turn runs from its `turn_started` row to the next row of its call that ends it
(a step published, a lost attempt, a terminal row); an open one runs to `now`. A
session turn bound after it started (the owner reported it late, or the run found
it by its marker, perhaps after it ended) runs from the host's start of the turn
its row records (`host_started_at`), never before its step was published.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any, TypeVar

from crw.engine.held_reasons import paused_why
from crw.engine.views.run_view import parse_at
from crw.journal.replay import CallState, add_tokens, replay, token_parts

Row = Mapping[str, Any]


@dataclass
class Mark:
    """Something that happened at one time: `kind` is repair, lost, interrupt,
    held, null_model, decision, superseded, review_accept or review_reject (of a
    call), or started, paused, ended (of the run)."""

    kind: str
    at: float
    text: str


@dataclass
class Turn:
    k: int
    attempt: int
    start: float
    end: float | None = None
    repair: bool = False
    ended_by: str = ""
    tokens_before: dict[str, int] | None = None
    tokens_after: dict[str, int] | None = None

    @property
    def tokens(self) -> dict[str, int] | None:
        """What the turn counted: the call's tokens after it less those before it,
        when the rows say both (a repair on the open subagent records what came
        before; the terminal row what the call counted in all)."""
        before, after = self.tokens_before, self.tokens_after
        if before is None or after is None:
            return None
        return {part: after[part] - before.get(part, 0) for part in after}


@dataclass
class Attempt:
    n: int
    start: float
    end: float | None = None
    lost: bool = False


@dataclass
class Track:
    """One call as time: from its prepared row to its terminal row (or `now`)."""

    call: str
    node: str
    role: str
    start: float
    end: float | None = None
    state: str = "prepared"
    """As the replay reads it (`CallState.state`)."""
    reason: str | None = None
    resume: str | None = None
    review: str | None = None
    """A review call: the call whose answer it judges (its prepared row says)."""
    tokens: dict[str, int] = field(default_factory=lambda: token_parts(None))
    attempts: list[Attempt] = field(default_factory=list)
    turns: list[Turn] = field(default_factory=list)
    marks: list[Mark] = field(default_factory=list)
    steps: dict[int, dict[str, Any]] = field(default_factory=dict)
    """What a turn reads of the newest step_published row of each k: its `repair`
    and `call_tokens`."""
    published: dict[int, float] = field(default_factory=dict)
    """When the newest step of each k was published."""

    @property
    def notable(self) -> bool:
        """Not simply completed: a state other than completed, or a repair, loss,
        interrupt, hold or rejection on the way."""
        return self.state != "completed" or any(m.kind != "review_accept" for m in self.marks)


@dataclass
class Tracks:
    start: datetime | None
    """The wall-clock time of the run's first row (None: no rows)."""
    end: float
    calls: list[Track]
    marks: list[Mark]
    """The run's own marks: each process started, paused, ended."""


def tracks(rows: Iterable[Row], now: datetime | None = None) -> Tracks:
    """Fold the rows into tracks; a turn, attempt or call still open ends at `now`
    (a live run's present), else at the last row's time. Each call's role, node,
    state and reason are as the run's replay reads them (`crw flow status`)."""
    rows = list(rows)
    fold = TrackFold()
    for row in rows:
        fold.read(row)
    return fold.tracks(replay(rows).calls, now)


class TrackFold:
    """The rows folded so far: each call's track, the run's marks, the first row's
    time and the last's. `read` folds on; `tracks` ends it."""

    def __init__(self) -> None:
        self.start: datetime | None = None
        self.last = 0.0
        self.calls: dict[str, Track] = {}
        self.marks: list[Mark] = []

    def read(self, row: Row) -> None:
        stamp = row.get("at")
        at = parse_at(stamp) if isinstance(stamp, str) else None
        if at is None:
            return
        if self.start is None:
            self.start = at
        t = max((at - self.start).total_seconds(), 0.0)
        self.last = max(self.last, t)
        kind, call = row.get("row"), row.get("call")
        if kind in _RUN_MARKS:
            self.marks.append(Mark(kind, t, _RUN_MARKS[kind](row)))
        if not isinstance(call, str) or kind not in _CALL_ROWS:
            return
        track = self.calls.get(call)
        if track is None:
            node = row.get("node") or call.rpartition(".")[0]
            track = self.calls[call] = Track(call, str(node), str(row.get("role") or "-"), t)
        if kind == "turn_started":
            t = _turn_start(track, row, t, self.start)
        _CALL_ROWS[kind](track, row, t)

    def tracks(self, replayed: Mapping[str, CallState], now: datetime | None) -> Tracks:
        """The tracks of the rows read, what is open ended at `now` (else at the
        last row's time), each call as `replayed` (the replay of the same rows)
        reads it. The fold is spent: its tracks are closed in place."""
        end = self.last
        if now is not None and self.start is not None:
            end = max(end, (now - self.start).total_seconds())
        calls = list(self.calls.values())
        for track in calls:
            _close(track, end)
            call = replayed.get(track.call)
            if call is not None:
                track.state, track.reason = call.state, call.reason
                track.node, track.role = call.node or track.node, call.role or track.role
        return Tracks(self.start, end, calls, self.marks)

    def values(self) -> list[Any]:
        """The fold as plain values (what `marshal` keeps); `TrackFold.of` makes it
        again."""
        start = None if self.start is None else self.start.isoformat()
        calls = [_track_values(track) for track in self.calls.values()]
        return [start, self.last, calls, [_values(mark, _MARK_FIELDS) for mark in self.marks]]

    @classmethod
    def of(cls, values: list[Any]) -> TrackFold:
        """The fold `values` holds.

        Raises:
            ValueError, TypeError: `values` is not a fold's.
        """
        start, last, calls, marks = values
        fold = cls()
        fold.start = None if start is None else datetime.fromisoformat(start)
        fold.last = float(last)
        fold.calls = {track[0]: _track_of(track) for track in calls}
        fold.marks = [_made(Mark, _MARK_FIELDS, mark) for mark in marks]
        return fold


def _track_values(track: Track) -> list[Any]:
    values = {name: getattr(track, name) for name in _TRACK_FIELDS}
    values["attempts"] = [_values(attempt, _ATTEMPT_FIELDS) for attempt in track.attempts]
    values["turns"] = [_values(turn, _TURN_FIELDS) for turn in track.turns]
    values["marks"] = [_values(mark, _MARK_FIELDS) for mark in track.marks]
    return list(values.values())


def _values(made: object, names: tuple[str, ...]) -> list[Any]:
    return [getattr(made, name) for name in names]


def _track_of(values: list[Any]) -> Track:
    """The track of `values` (`_track_values`'), made without the dataclasses'
    keyword calls: a 10,000-call run's fold holds some 40,000 of them."""
    made = dict(zip(_TRACK_FIELDS, values, strict=True))
    made["attempts"] = [_made(Attempt, _ATTEMPT_FIELDS, attempt) for attempt in made["attempts"]]
    made["turns"] = [_made(Turn, _TURN_FIELDS, turn) for turn in made["turns"]]
    made["marks"] = [_made(Mark, _MARK_FIELDS, mark) for mark in made["marks"]]
    track: Track = object.__new__(Track)
    track.__dict__ = made
    return track


_T = TypeVar("_T")


def _made(kind: type[_T], names: tuple[str, ...], values: list[Any]) -> _T:
    made: _T = object.__new__(kind)
    made.__dict__ = dict(zip(names, values, strict=True))
    return made


_TRACK_FIELDS = tuple(f.name for f in fields(Track))
_ATTEMPT_FIELDS = tuple(f.name for f in fields(Attempt))
_TURN_FIELDS = tuple(f.name for f in fields(Turn))
_MARK_FIELDS = tuple(f.name for f in fields(Mark))
FOLD_FIELDS = (_TRACK_FIELDS, _ATTEMPT_FIELDS, _TURN_FIELDS, _MARK_FIELDS)
"""The fields a fold's values hold, in order (a snapshot of another crw's fold
names others)."""


def _turn_start(track: Track, row: Row, t: float, run_start: datetime) -> float:
    """When the turn began: its bind's time `t`, or the host's start of the turn
    when the row records an earlier one (Unix seconds, so cut to the second: never
    before the turn's step was published)."""
    host = row.get("host_started_at")
    if not isinstance(host, int) or isinstance(host, bool):
        return t
    began = host - run_start.timestamp()
    published = track.published.get(int(row.get("k") or 0), track.start)
    return max(published, min(t, began))


def _close(track: Track, end: float) -> None:
    for turn in track.turns:
        turn.end = end if turn.end is None else turn.end
    for attempt in track.attempts:
        attempt.end = end if attempt.end is None else attempt.end
    track.end = end if track.end is None else track.end


def _end_turn(track: Track, t: float, by: str) -> None:
    if track.turns and track.turns[-1].end is None:
        track.turns[-1].end, track.turns[-1].ended_by = t, by


def _attempt(track: Track, n: int, t: float) -> None:
    if n and all(attempt.n != n for attempt in track.attempts):
        track.attempts.append(Attempt(n, t))


def _prepared(track: Track, row: Row, t: float) -> None:
    track.resume = row.get("resume") or track.resume
    track.review = row.get("review") or track.review


def _step(track: Track, row: Row, t: float) -> None:
    _end_turn(track, t, "step")
    k = int(row.get("k") or 0)
    track.steps[k] = {"repair": row.get("repair"), "call_tokens": row.get("call_tokens")}
    track.published[k] = t
    call_tokens = row.get("call_tokens")
    if call_tokens is not None and track.turns and track.turns[-1].tokens_after is None:
        track.turns[-1].tokens_after = add_tokens(track.tokens, token_parts(call_tokens))
    _attempt(track, int(row.get("attempt") or 0), t)
    if row.get("repair"):
        errors = row.get("repair_errors")
        count = len(errors) if isinstance(errors, list) else 0
        more = f": {count} schema error{'s' if count != 1 else ''}" if count else ""
        track.marks.append(Mark("repair", t, f"repair turn {k} published{more}"))


def _thread(track: Track, row: Row, t: float) -> None:
    _attempt(track, int(row.get("attempt") or 0), t)


def _turn(track: Track, row: Row, t: float) -> None:
    _end_turn(track, t, "turn")
    k, attempt = int(row.get("k") or 0), int(row.get("attempt") or 0)
    step = track.steps.get(k, {})
    turn = Turn(k, attempt, t, repair=bool(step.get("repair") or row.get("conversation_turn") == 2))
    previous = track.turns[-1] if track.turns else None
    if step.get("call_tokens") is not None:
        turn.tokens_before = add_tokens(track.tokens, token_parts(step.get("call_tokens")))
    elif previous is None or previous.ended_by == "terminal":
        turn.tokens_before = dict(track.tokens)
    track.turns.append(turn)
    _attempt(track, attempt, t)


def _lost(track: Track, row: Row, t: float) -> None:
    _end_turn(track, t, "lost")
    n = int(row.get("attempt") or 0)
    for attempt in track.attempts:
        if attempt.n == n and attempt.end is None:
            attempt.end, attempt.lost = t, True
    track.marks.append(Mark("lost", t, f"attempt {n} lost: {row.get('reason') or 'lost'}"))


def _interrupt(track: Track, row: Row, t: float) -> None:
    track.marks.append(Mark("interrupt", t, f"interrupt requested: {row.get('reason') or '-'}"))


def _terminal(track: Track, row: Row, t: float) -> None:
    kind = str(row["row"])
    _end_turn(track, t, "terminal")
    counted = token_parts(row.get("tokens"))
    if track.turns and track.turns[-1].ended_by == "terminal":
        track.turns[-1].tokens_after = add_tokens(track.tokens, counted)
    track.tokens = add_tokens(track.tokens, counted)
    for attempt in track.attempts:
        attempt.end = t if attempt.end is None else attempt.end
    track.end = t
    mark = _terminal_mark(kind, row, review=track.review is not None)
    if mark is not None:
        track.marks.append(Mark(mark[0], t, mark[1]))


def _terminal_mark(kind: str, row: Row, *, review: bool) -> tuple[str, str] | None:
    """The mark a terminal row leaves: a review's verdict (only a review call's: a
    plain node whose answer has a `verdict` is no review), or what ended the call."""
    result = row.get("result")
    verdict = result.get("verdict") if isinstance(result, Mapping) else None
    if kind == "completed" and review and isinstance(verdict, str):
        found = result.get("findings") if isinstance(result, Mapping) else None
        count = len(found) if isinstance(found, list) else 0
        text = f"review: {verdict} ({count} finding{'s' if count != 1 else ''})"
        return ("review_accept" if verdict == "accept" else "review_reject", text)
    if kind == "completed":
        return None
    if kind == "superseded":
        return ("superseded", f"superseded by {row.get('by') or '-'}")
    reason = row.get("reason") or kind
    error = row.get("error")
    return (kind, f"{kind}: {reason}" + (f": {error}" if error else ""))


def _decision(track: Track, row: Row, t: float) -> None:
    choice = row.get("choice") or "-"
    if choice == "retry":  # the call goes on in place
        track.end = None
    by = f" (runs again as {row.get('by')})" if row.get("by") else ""
    track.marks.append(Mark("decision", t, f"answered {choice}{by}"))


_CALL_ROWS = {
    "prepared": _prepared,
    "step_published": _step,
    "thread_started": _thread,
    "turn_started": _turn,
    "session_attempt_lost": _lost,
    "interrupt_requested": _interrupt,
    "completed": _terminal,
    "null_model": _terminal,
    "held": _terminal,
    "superseded": _terminal,
    "decision": _decision,
}

_RUN_MARKS = {
    "started": lambda row: f"process started (pid {row.get('pid') or '-'})",
    "paused": lambda row: f"paused {paused_why(row.get('reason'))}",
    "ended": lambda row: f"ended: {row.get('status') or 'ended'}",
}
