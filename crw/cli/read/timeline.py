"""`crw flow timeline RUN --out FILE.svg|.html`: the run's timeline as a picture.

It reads the run directory only (a run only the database keeps, its directory on
another machine: its rows in the database, as `show` reads them, its fold's
snapshot none): the journal's rows folded into tracks (from
the snapshot of that fold and the rows after it, `crw.cli.read.timeline_read`),
laid out with `crw.engine.views.timeline.layout_tracks`, drawn as SVG (an HTML
page holds the same SVG). Every text a row may carry (a call id, a reason, a host's error) is
escaped for XML: markup characters as entities, a lone surrogate or a control
character XML cannot hold as U+FFFD. The file is written whole or not at all,
with the user's umask like any file the user names.
"""

from __future__ import annotations

import os
import re
from datetime import UTC, datetime
from html import escape
from pathlib import Path
from typing import Any

from crw.cli.output import emit, format_tokens
from crw.engine.views.timeline import (
    MARK_KINDS,
    MAX_LANES,
    TURN_KINDS,
    Shape,
    Timeline,
    layout_tracks,
)
from crw.errors import InputError
from crw.text import replace_surrogates

COLOURS = {
    "turn": "#3b73d9",
    "repair_turn": "#f28c28",
    "attempt": "#4a4a8a",
    "attempt_lost": "#d62728",
    "repair": "#a65200",
    "lost": "#d62728",
    "interrupt": "#8e44ad",
    "held": "#a50f15",
    "null_model": "#333333",
    "decision": "#138d75",
    "superseded": "#7f7f7f",
    "review_accept": "#2ca02c",
    "review_reject": "#c2185b",
    "span_completed": "#dcefdc",
    "span_running": "#dbe7fa",
    "span_held": "#f6d5d2",
    "span_null_model": "#e3e3e3",
    "span_superseded": "#eeeeee",
    "span_prepared": "#eceff4",
    "span_waiting_session": "#eceff4",
    "span_lost": "#fde2c8",
    "span_skipped": "#e3e3e3",
    "span_restarting": "#eeeeee",
    "run_started": "#9e9e9e",
    "run_paused": "#e67e22",
    "run_ended": "#222222",
    "load": "#8fa8d8",
}
"""The colour of each kind of shape (the browser test looks for them)."""
FORMATS = {".svg": "svg", ".html": "html"}
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ufffe\uffff]")


def xml_text(text: str) -> str:
    """`text` as XML character data or an attribute's value: `<>&"'` escaped, and
    each character XML 1.0 cannot hold (a lone surrogate, a control character) or
    a reader would not see (DEL, C1, a bidi control, which reorders the text
    around it) replaced by U+FFFD."""
    return escape(_NOT_XML.sub("\ufffd", replace_surrogates(text)), quote=True)


def timeline_command(
    run: str, *, out: str, state: str | None, json: bool, all_calls: bool = False
) -> int:
    from crw.cli.read.remote_run import find_here_or_elsewhere
    from crw.cli.read.timeline_read import read_tracks
    from crw.engine.run.locks import is_held
    from crw.engine.run.rundir import resolve_state
    from crw.private import write_atomic

    target = Path(out)
    kind = FORMATS.get(target.suffix.lower())
    if kind is None:
        raise InputError(f"--out {out}: name a .svg or .html file (the suffix picks the format)")
    if not target.parent.is_dir():
        raise InputError(f"--out {out}: the directory {target.parent} does not exist; make it")
    run_dir, elsewhere = find_here_or_elsewhere(resolve_state(state, os.environ, Path.cwd()), run)
    # A run only the database keeps is live while its machine's writer holds its lease.
    live = is_held(run_dir.run_lock) if elsewhere is None else elsewhere.live()
    now = datetime.now(UTC) if live else None
    read = read_tracks(run_dir, now=now, live=live)
    timeline = layout_tracks(read, run=run_dir.root.name, max_lanes=0 if all_calls else MAX_LANES)
    svg = render_svg(timeline)
    text = render_html(timeline.title, svg) if kind == "html" else svg
    data = text.encode("utf-8")
    write_atomic(target, data, durable=False, private=False)  # the user's file
    payload: dict[str, Any] = {
        "run": run_dir.root.name,
        "out": str(target),
        "format": kind,
        "bytes": len(data),
        "width": timeline.width,
        "height": timeline.height,
        "calls": timeline.calls,
        "lanes": timeline.lanes,
        "note": timeline.note,
        "live": live,
    }
    emit(json, payload, lambda: _human(payload))
    return 0


def _human(payload: dict[str, Any]) -> str:
    shown = len(payload["lanes"])
    calls = payload["calls"]
    lanes = f"{shown} lanes" if shown == calls else f"{shown} of {calls} calls in lanes"
    return f"wrote {payload['out']} ({payload['format']}, {lanes}; {payload['note']})"


def render_html(title: str, svg: str) -> str:
    """A page that shows the SVG at its size, nothing around it."""
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{xml_text(title)}</title>"
        "<style>html,body{margin:0;padding:0;background:#fff}svg{display:block}</style>"
        f"</head><body>\n{svg}</body></html>\n"
    )


def render_svg(timeline: Timeline) -> str:
    """The timeline as an SVG document."""
    w, h = f"{timeline.width:g}", f"{timeline.height:g}"
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}"'
        ' font-family="DejaVu Sans, Arial, sans-serif" font-size="11">',
        f'<rect width="{w}" height="{h}" fill="#ffffff"/>',
        f'<text x="16" y="32" font-size="15" font-weight="bold">{xml_text(timeline.title)}</text>',
        f'<text x="16" y="50" fill="#555555">{xml_text(timeline.note)}</text>',
    ]
    order = sorted(timeline.shapes, key=lambda shape: _LAYER.get(shape.kind.split("_")[0], 2))
    parts += [_draw(shape) for shape in order]
    parts.append("</svg>\n")
    return "\n".join(parts)


_LAYER = {"span": 0, "tick": 0, "axis": 0, "attempt": 1, "load": 1, "run": 3}
"""What is drawn first: the calls' spans and the grid under the bars, the run's
marks over them (the marks of a call and the text are drawn between)."""


def _draw(shape: Shape) -> str:
    kind = shape.kind
    title = f"<title>{xml_text(_tooltip(shape))}</title>" if shape.title else ""
    if kind.startswith("legend:"):
        return _legend(shape)
    if kind == "lane_label":
        return (
            f'<text x="{shape.x:.1f}" y="{shape.y + 4:.1f}">{title}{xml_text(shape.label)}</text>'
        )
    if kind in ("axis", "tick"):
        return _tick(shape)
    if kind.startswith("run_"):
        return _run_line(shape, title)
    if kind == "load":
        return _load(shape, title)
    if kind in MARK_KINDS:
        return _glyph(kind, shape.x, shape.y, shape.w, title)
    return _bar(shape, title)


def _tooltip(shape: Shape) -> str:
    if shape.tokens is None or not shape.tokens.get("total"):
        return shape.title
    return f"{shape.title}; tokens {format_tokens(shape.tokens)}"


def _bar(shape: Shape, title: str) -> str:
    fill = COLOURS.get(shape.kind, "#cccccc")
    rect = (
        f'<rect x="{shape.x:.1f}" y="{shape.y:.1f}" width="{shape.w:.1f}" '
        f'height="{shape.h:.1f}" fill="{fill}">{title}</rect>'
    )
    if shape.kind not in TURN_KINDS or not shape.label or shape.w < 7 * len(shape.label) + 6:
        return rect
    text = (
        f'<text x="{shape.x + shape.w / 2:.1f}" y="{shape.y + shape.h - 2.5:.1f}" '
        f'font-size="9" fill="#ffffff" text-anchor="middle" pointer-events="none">'
        f"{xml_text(shape.label)}</text>"
    )
    return f"<g>{rect}{text}</g>"


def _glyph(kind: str, x: float, y: float, size: float, title: str) -> str:
    """A call's mark centred at (x, y): its shape tells its kind with its colour."""
    fill, r = COLOURS[kind], size / 2
    if kind == "repair":
        points = f"{x:.1f},{y - r:.1f} {x + r:.1f},{y:.1f} {x:.1f},{y + r:.1f} {x - r:.1f},{y:.1f}"
        return f'<polygon points="{points}" fill="{fill}" stroke="#ffffff">{title}</polygon>'
    if kind == "lost":
        a, b, c, d = (f"{v:.1f}" for v in (x - r, y - r, x + r, y + r))
        path = f"M{a},{b}L{c},{d}M{a},{d}L{c},{b}"
        return f'<path d="{path}" stroke="{fill}" stroke-width="3">{title}</path>'
    if kind == "interrupt":
        points = f"{x - r:.1f},{y - r:.1f} {x + r:.1f},{y - r:.1f} {x:.1f},{y + r:.1f}"
        return f'<polygon points="{points}" fill="{fill}" stroke="#ffffff">{title}</polygon>'
    if kind.startswith("review") or kind == "decision":
        return (
            f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{r:.1f}" fill="{fill}" '
            f'stroke="#ffffff">{title}</circle>'
        )
    return (
        f'<rect x="{x - r:.1f}" y="{y - r:.1f}" width="{size:.1f}" height="{size:.1f}" '
        f'fill="{fill}" stroke="#ffffff">{title}</rect>'
    )


def _line(x1: float, y1: float, x2: float, y2: float, style: str, title: str = "") -> str:
    ends = f'x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}"'
    return f"<line {ends} {style}>{title}</line>"


def _tick(shape: Shape) -> str:
    if shape.kind == "axis":
        return _line(shape.x, shape.y, shape.x + shape.w, shape.y, 'stroke="#888888"')
    grid = _line(shape.x, shape.y, shape.x, shape.y + shape.h, 'stroke="#eeeeee"')
    return (
        f'{grid}<text x="{shape.x:.1f}" y="{shape.y - 5:.1f}" text-anchor="middle" '
        f'fill="#555555">{xml_text(shape.label)}</text>'
    )


def _run_line(shape: Shape, title: str) -> str:
    colour = COLOURS.get(shape.kind, "#222222")
    style = f'stroke="{colour}" stroke-width="1.5" stroke-dasharray="4 3"'
    return _line(shape.x, shape.y, shape.x, shape.y + shape.h, style, title)


def _load(shape: Shape, title: str) -> str:
    points = " ".join(f"{x:.1f},{y:.1f}" for x, y in shape.points)
    return (
        f'<g><text x="{shape.x:.1f}" y="{shape.y + 4:.1f}">{xml_text(shape.label)}</text>'
        f'<polygon points="{points}" fill="{COLOURS["load"]}">{title}</polygon></g>'
    )


def _legend(shape: Shape) -> str:
    kind = shape.kind.removeprefix("legend:")
    x, y = shape.x, shape.y
    if kind in MARK_KINDS:
        swatch = _glyph(kind, x + 6, y - 4, 10, "")
    elif kind.startswith("run_"):
        swatch = _run_line(Shape(kind, x + 6, y - 10, 0, 12), "")
    else:
        height = 4 if kind.startswith("attempt") else 10
        swatch = _bar(Shape(kind, x, y - 4 - height / 2, 14, height), "")
    return f'{swatch}<text x="{x + 18:.1f}" y="{y:.1f}">{xml_text(shape.label)}</text>'
