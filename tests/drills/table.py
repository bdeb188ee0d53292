"""The drills' table: each drill says what it found (`found`), and the run prints a
table of drill x outcome at its end. With `CRW_DRILLS_TABLE=PATH` the run also
writes the table, as markdown, into PATH between its two `<!-- drills -->` lines
(`make drills-table` regenerates docs/drills.md so)."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

HEADER = ("tier", "point", "stop", "held", "end", "outcome")
MARK = "<!-- drills -->"
_found: dict[str, tuple[str, str, str, dict[str, Any]]] = {}
_outcome: dict[str, str] = {}


@pytest.fixture
def found(request: pytest.FixtureRequest) -> Iterator[dict[str, Any]]:
    """What the drill found: its test fills `held` (the held reason) and `end`, and
    `point` and `stop` when its parameters do not name them."""
    seen: dict[str, Any] = {}
    yield seen
    request.node.user_properties.append(("drill", seen))


def _ours(nodeid: str) -> bool:
    return nodeid.startswith("tests/drills/")


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if not _ours(report.nodeid):
        return
    if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
        _outcome[report.nodeid] = "xfailed" if hasattr(report, "wasxfail") else report.outcome
    if report.when == "teardown":
        params = re.search(r"\[(.*)\]$", report.nodeid)
        point, stop = params.group(1).split("-", 1) if params else ("", "")
        tier = "in-process" if "test_interrupt_drills" in report.nodeid else "process"
        seen = dict(report.user_properties).get("drill")
        seen = seen if isinstance(seen, dict) else {}
        point, stop = seen.get("point", point), seen.get("stop", stop)
        _found[report.nodeid] = (tier, point, stop, seen)


def table() -> list[tuple[str, ...]]:
    return [
        (tier, point, stop, seen.get("held", "-"), seen.get("end", "-"), _outcome[nodeid])
        for nodeid, (tier, point, stop, seen) in _found.items()
        if nodeid in _outcome
    ]


def markdown(rows: list[tuple[str, ...]]) -> str:
    lines = ["| " + " | ".join(HEADER) + " |", "|" + " --- |" * len(HEADER)]
    return "\n".join([*lines, *("| " + " | ".join(row) + " |" for row in rows)])


def pytest_terminal_summary(terminalreporter: Any) -> None:
    rows = table()
    if not rows:
        return
    widths = [max(len(r[i]) for r in [HEADER, *rows]) for i in range(len(HEADER))]
    terminalreporter.section("drills")
    for row in [HEADER, *rows]:
        cells = (c.ljust(w) for c, w in zip(row, widths, strict=True))
        terminalreporter.write_line("  ".join(cells).rstrip())
    target = os.environ.get("CRW_DRILLS_TABLE")
    if target:
        path = Path(target)
        before, _, rest = path.read_text().partition(MARK + "\n")
        _, _, after = rest.partition(MARK + "\n")
        path.write_text(f"{before}{MARK}\n{markdown(rows)}\n{MARK}\n{after}")
