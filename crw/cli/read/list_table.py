"""The table of `crw flow list`, fitted to the terminal's width (80 columns when
the output is not a terminal).

A run's id is never cut: it is what every other command takes. The columns are
chosen so a typical row fits 80 columns: the start time is left out (the run id
carries it, `<workflow>-YYYYMMDD-HHMMSS-xxxx`), the backend is `sess` or `app`,
the last row's age a bare `12s`, whether a process holds the run `yes` or `no`
(the pid is in `--json`). A narrower terminal first cuts a long state's reason
to STATE_KEPT characters (`…` marks the cut), then drops whole columns in the
order of DROPPED, then cuts the state down to STATE_MIN. Pure: rows of cells
in, lines out; standard library only, so the command's cold start stays small.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

HEADER = ("RUN", "VIA", "STATE", "CALLS", "TOKENS", "LAST", "LIVE")
RIGHT = frozenset({"CALLS", "TOKENS"})
"""The right-aligned columns; the gap before one is a single space (its cells,
narrower than its heading, leave the rest of the gap themselves)."""
DROPPED = ("VIA", "LAST", "TOKENS", "LIVE", "CALLS")
"""The columns a narrow terminal drops, first to last."""
STATE_KEPT = 17
"""What a state is cut to before any column is dropped: `ended (completed)` whole."""
STATE_MIN = 7
"""What a state is cut to at the narrowest: `running` whole."""
BACKENDS = {"session": "sess", "app-server": "app"}


@dataclass(frozen=True)
class _Layout:
    columns: tuple[int, ...]
    """The indexes into HEADER of the columns shown."""
    state_width: int | None
    """The width STATE is cut to, None for uncut."""


def fit(rows: Sequence[Sequence[str]], width: int) -> list[str]:
    """The header and `rows` (one cell per HEADER column) as lines of at most
    `width` columns where the run ids allow it, trailing spaces stripped."""
    table = [tuple(HEADER), *(tuple(row) for row in rows)]
    layout = _choose(table, width)
    shown = [[_cut(row, i, layout.state_width) for i in layout.columns] for row in table]
    widths = [max(len(row[j]) for row in shown) for j in range(len(layout.columns))]
    lines = []
    for row in shown:
        line = ""
        for j, (i, cell) in enumerate(zip(layout.columns, row, strict=True)):
            right = HEADER[i] in RIGHT
            if j:
                line += " " if right else "  "
            line += cell.rjust(widths[j]) if right else cell.ljust(widths[j])
        lines.append(line.rstrip())
    return lines


def _choose(table: list[tuple[str, ...]], width: int) -> _Layout:
    """The widest layout that fits: every column, then the state cut to
    STATE_KEPT, then columns dropped in DROPPED's order, then the state cut to
    STATE_MIN; the narrowest of them when none fits."""
    columns = list(range(len(HEADER)))
    layouts = [_Layout(tuple(columns), None), _Layout(tuple(columns), STATE_KEPT)]
    for name in DROPPED:
        columns.remove(HEADER.index(name))
        layouts.append(_Layout(tuple(columns), STATE_KEPT))
    layouts.append(_Layout(tuple(columns), STATE_MIN))
    for layout in layouts:
        if _width(table, layout) <= width:
            return layout
    return layouts[-1]


def _width(table: list[tuple[str, ...]], layout: _Layout) -> int:
    total = 0
    for j, i in enumerate(layout.columns):
        if j:
            total += 1 if HEADER[i] in RIGHT else 2
        total += max(len(_cut(row, i, layout.state_width)) for row in table)
    return total


def _cut(row: tuple[str, ...], index: int, state_width: int | None) -> str:
    cell = row[index]
    if HEADER[index] != "STATE" or state_width is None or len(cell) <= state_width:
        return cell
    return cell[: state_width - 1].rstrip() + "…"


def age(seconds: int | None) -> str:
    """`12s`, `5m`, `3h`, `4d`; `-` for none."""
    if seconds is None:
        return "-"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{max(0, seconds)}s"


def backend(name: str | None) -> str:
    """The backend as the VIA column shows it."""
    return BACKENDS.get(name or "", name or "-")
