"""The timeline of a run as shapes: one lane per call, its attempts and turns as
bars on a time axis, its repairs, losses, interrupts, holds and reviews as marks,
each turn's tokens, a legend and the run's own marks (a process started, paused,
ended) across every lane.

Pure: rows in, shapes out (`layout`); `crw.cli.read.timeline` draws them as SVG. A run
of more than `MAX_LANES` calls keeps its lanes readable: it shows the calls that
are not simply completed first, then others spread evenly over the run, and a
lane on top that counts every call in flight; the note says how many are left
out. Coordinates are pixels, y down.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from crw.engine.views.timeline_tracks import Mark, Row, Track, Tracks, tracks

MAX_LANES = 100
MARGIN = 16
LABEL_W = 200
PLOT_W = 960
HEADER_H = 52
AXIS_H = 26
LANE_H = 24
LEGEND_H = 64
TURN_Y, TURN_H = 5, 12
"""A turn's bar within its lane."""
ATTEMPT_Y, ATTEMPT_H = 18, 4
"""An attempt's bar, under its turns."""
MARK_SIZE = 10
LABEL_CHARS = 30
"""A lane's label longer than this is cut (with …) to fit its column; its tooltip
holds it whole."""

TURN_KINDS = ("turn", "repair_turn")
MARK_KINDS = (
    "repair",
    "lost",
    "interrupt",
    "held",
    "null_model",
    "decision",
    "superseded",
    "review_accept",
    "review_reject",
)
LEGEND = (
    ("turn", "turn"),
    ("repair_turn", "repair turn"),
    ("attempt", "attempt"),
    ("attempt_lost", "lost attempt"),
    ("repair", "repair"),
    ("lost", "lost"),
    ("interrupt", "interrupt"),
    ("held", "held"),
    ("null_model", "null model"),
    ("decision", "decision"),
    ("review_accept", "review: accept"),
    ("review_reject", "review: reject"),
    ("span_completed", "call completed"),
    ("span_running", "call running"),
    ("span_held", "call held"),
    ("span_waiting_session", "call waiting"),
    ("span_skipped", "call skipped"),
    ("run_started", "process started"),
    ("run_paused", "run paused"),
    ("run_ended", "run ended"),
)
"""What the legend shows: each kind of shape and its words."""


@dataclass(frozen=True)
class Shape:
    """A rect (x, y, w, h), a mark centred at (x, y), a text at (x, y), or a
    polygon (`points`); `title` is its tooltip, `label` its visible text."""

    kind: str
    x: float
    y: float
    w: float = 0.0
    h: float = 0.0
    title: str = ""
    label: str = ""
    tokens: dict[str, int] | None = None
    points: tuple[tuple[float, float], ...] = ()


@dataclass
class Timeline:
    width: float
    height: float
    title: str
    note: str
    calls: int
    lanes: list[str] = field(default_factory=list)
    """The calls shown, one lane each, top to bottom."""
    shapes: list[Shape] = field(default_factory=list)


def layout(
    rows: Iterable[Row], *, run: str, now: datetime | None = None, max_lanes: int = MAX_LANES
) -> Timeline:
    """The run's timeline; `now` ends what is still open (a live run), else the
    last row does; `max_lanes` 0 shows every call."""
    return layout_tracks(tracks(rows, now), run=run, max_lanes=max_lanes)


def layout_tracks(read: Tracks, *, run: str, max_lanes: int = MAX_LANES) -> Timeline:
    """The timeline of the tracks `read` (`layout`'s, folded already)."""
    shown = _choose(read.calls, max_lanes)
    load = len(shown) < len(read.calls)
    top = MARGIN + HEADER_H + AXIS_H + (LANE_H if load else 0)
    height = top + LANE_H * len(shown) + LEGEND_H + MARGIN
    scale = _Scale(read.end)
    timeline = Timeline(
        width=MARGIN * 3 + LABEL_W + PLOT_W,
        height=height,
        title=_title(run, read),
        note=_note(len(read.calls), shown, read.calls),
        calls=len(read.calls),
        lanes=[track.call for track in shown],
    )
    add = timeline.shapes.append
    for n, track in enumerate(shown):
        timeline.shapes += _lane(track, top + n * LANE_H, scale)
    if load:
        add(_load(read.calls, top - LANE_H, scale))
    timeline.shapes += _axis(scale, MARGIN + HEADER_H, top + LANE_H * len(shown))
    timeline.shapes += _run_marks(read.marks, scale, MARGIN + HEADER_H + AXIS_H, top, len(shown))
    timeline.shapes += _legend(height - MARGIN - LEGEND_H + 28)
    return timeline


class _Scale:
    def __init__(self, end: float) -> None:
        self.end = max(end, 0.001)
        self.left = MARGIN + LABEL_W

    def x(self, t: float) -> float:
        return self.left + PLOT_W * min(max(t, 0.0), self.end) / self.end

    def w(self, start: float, end: float | None) -> float:
        return max(self.x(self.end if end is None else end) - self.x(start), 1.0)


def _choose(calls: list[Track], max_lanes: int) -> list[Track]:
    """Every call, or when there are more than `max_lanes`: the notable ones first,
    then others at even steps through the run; shown in the order they began."""
    if max_lanes <= 0 or len(calls) <= max_lanes:
        return calls
    notable = [track for track in calls if track.notable][:max_lanes]
    rest = [track for track in calls if not track.notable]
    room = max_lanes - len(notable)
    spread = [rest[i * len(rest) // room] for i in range(room)] if room and rest else []
    chosen = {id(track) for track in notable + spread}
    return [track for track in calls if id(track) in chosen]


def _title(run: str, read: Tracks) -> str:
    began = read.start.strftime("%Y-%m-%d %H:%M:%S UTC") if read.start else "no rows yet"
    return f"run {run} · {began} · {_duration(read.end)} · {len(read.calls):,} calls"


def _note(total: int, shown: Sequence[Track], calls: Sequence[Track]) -> str:
    if len(shown) == total:
        return "one lane per call; hover a bar or mark for its details"
    notable = sum(1 for track in calls if track.notable)
    return (
        f"{len(shown):,} of {total:,} calls shown (every call not simply completed, "
        f"{notable:,} of them, first; then others spread over the run); the top lane "
        f"counts every call in flight; --all draws a lane for each"
    )


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(round(seconds), 60)
    return f"{minutes // 60}h {minutes % 60:02d}m" if minutes >= 60 else f"{minutes}m {secs:02d}s"


def _lane(track: Track, y: float, scale: _Scale) -> list[Shape]:
    label = f"{track.call} {track.role}" + (f" ← {track.resume}" if track.resume else "")
    label = label if len(label) <= LABEL_CHARS else label[: LABEL_CHARS - 1] + "…"
    about = f"{track.call}: {track.role}, node {track.node}, {track.state}"
    about += f" ({track.reason})" if track.reason else ""
    about += f"; continues {track.resume}" if track.resume else ""
    about += f"; reviews {track.review}" if track.review else ""
    span_kind = f"span_{track.state}"
    shapes = [
        Shape("lane_label", MARGIN, y + LANE_H / 2, title=about, label=label),
        Shape(span_kind, scale.x(track.start), y + 2, scale.w(track.start, track.end), LANE_H - 4,
              title=f"{about}; {_duration((track.end or 0) - track.start)}", tokens=track.tokens),
    ]  # fmt: skip
    for attempt in track.attempts:
        kind = "attempt_lost" if attempt.lost else "attempt"
        shapes.append(
            Shape(kind, scale.x(attempt.start), y + ATTEMPT_Y, scale.w(attempt.start, attempt.end),
                  ATTEMPT_H, title=f"{track.call} attempt {attempt.n}" + (" (lost)" * attempt.lost))
        )  # fmt: skip
    for turn in track.turns:
        tokens = turn.tokens
        kind = "repair_turn" if turn.repair else "turn"
        title = f"{track.call} turn {turn.k} (attempt {turn.attempt}){' repair' * turn.repair}"
        title += f"; {_duration((turn.end or 0) - turn.start)}"
        shapes.append(
            Shape(kind, scale.x(turn.start), y + TURN_Y, scale.w(turn.start, turn.end), TURN_H,
                  title=title, label=f"{tokens['total']:,}" if tokens else "", tokens=tokens)
        )  # fmt: skip
    shapes += [_mark(mark, y + LANE_H / 2, scale, track.call) for mark in track.marks]
    return shapes


def _mark(mark: Mark, y: float, scale: _Scale, call: str) -> Shape:
    return Shape(mark.kind, scale.x(mark.at), y, MARK_SIZE, MARK_SIZE, title=f"{call}: {mark.text}")


def _load(calls: Sequence[Track], y: float, scale: _Scale) -> Shape:
    """Calls in flight over time, every call counted: a step polygon in one lane."""
    events = sorted(
        [(t.start, 1) for t in calls] + [(scale.end if t.end is None else t.end, -1) for t in calls]
    )
    x = scale.x  # a 10,000-call run's lane has 40,000 points: each step's x once
    level, peak, steps = 0, 1, [(x(0.0), 0)]
    for at, change in events:
        here = x(at)
        steps.append((here, level))
        level += change
        steps.append((here, level))
        peak = max(peak, level)
    base, height = y + LANE_H - 2, LANE_H - 4
    points = tuple([(at, base - height * n / peak) for at, n in steps])
    points += ((scale.x(scale.end), base),)
    return Shape("load", MARGIN, y + LANE_H / 2, title=f"calls in flight (at most {peak:,})",
                 label=f"in flight (max {peak:,})", points=points)  # fmt: skip


def _axis(scale: _Scale, y: float, bottom: float) -> list[Shape]:
    step = _tick_step(scale.end)
    shapes = [Shape("axis", scale.left, y + AXIS_H - 2, PLOT_W, 0)]
    n = 0
    while n * step <= scale.end + 1e-9:
        x = scale.x(n * step)
        shapes.append(Shape("tick", x, y + AXIS_H - 2, 0, bottom - y - AXIS_H + 2,
                            label=_tick_label(n * step, step)))  # fmt: skip
        n += 1
    return shapes


def _tick_step(end: float) -> float:
    """1, 2 or 5 times a power of ten seconds (or 1, 2, 5, 10, 15, 30 minutes or
    hours), at most 10 ticks over the run."""
    units = [m * 10.0**e for e in range(-3, 2) for m in (1, 2, 5)]
    units += [60.0 * m for m in (1, 2, 5, 10, 15, 30)] + [3600.0 * m for m in (1, 2, 6, 12, 24)]
    return next((unit for unit in units if end / unit <= 10), end / 10)


def _tick_label(t: float, step: float) -> str:
    if step < 1:
        return f"{t:.{max(0, -int(f'{step:e}'.split('e')[1]))}f} s"
    if step < 60:
        return f"{t:.0f} s"
    if step < 3600:
        return f"{int(t // 60)}m"
    return f"{int(t // 3600)}h"


def _run_marks(
    marks: list[Mark], scale: _Scale, top: float, lanes_top: float, lanes: int
) -> list[Shape]:
    bottom = lanes_top + LANE_H * lanes
    return [
        Shape(f"run_{mark.kind}", scale.x(mark.at), top, 0, bottom - top, title=mark.text)
        for mark in marks
    ]


def _legend(y: float) -> list[Shape]:
    per_row = 9
    width = (LABEL_W + PLOT_W) / per_row
    return [
        Shape(f"legend:{kind}", MARGIN + (n % per_row) * width, y + (n // per_row) * 20, label=text)
        for n, (kind, text) in enumerate(LEGEND)
    ]
