"""The drills' table, a plugin of the whole suite (tests/conftest.py loads it): each
drill says what it found (`found`, in tests/drills/conftest.py), and the run prints
a table of drill x outcome at its end. With `CRW_DRILLS_TABLE=PATH` the run also
writes the table, as markdown, into PATH between its two `<!-- drills -->` lines
(`make drills-table` regenerates docs/drills.md so).

Under pytest-xdist the workers run the drills and the controller, which sees every
report, keeps the table and writes it once, its rows in the order the tests were
collected (as a run without workers has them).

A drill's point and stop are its test id's parameters (`running-pause-v2`: point
`running`, stop `pause`), unless it names them; its protocol is the parameter `v1`
or `v2` wherever the id has it (`v2-shared_owner-unreported`), else v1 (a session
run that forces none and whose owner's config turns v2 off speaks v1)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest

HEADER = ("tier", "point", "stop", "protocol", "held", "end", "outcome")
PROTOCOLS = ("v1", "v2")
MARK = "<!-- drills -->"
_found: dict[str, tuple[str, str, str, dict[str, Any]]] = {}
_outcome: dict[str, str] = {}
_order: dict[str, int] = {}


def _ours(nodeid: str) -> bool:
    return nodeid.startswith("tests/drills/")


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if not _ours(report.nodeid):
        return
    if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
        _outcome[report.nodeid] = "xfailed" if hasattr(report, "wasxfail") else report.outcome
    if report.when == "teardown":
        point, stop, protocol = parameters(report.nodeid)
        tier = "in-process" if "test_interrupt_drills" in report.nodeid else "process"
        tier += ", postgres" if "_postgres.py::" in report.nodeid else ""
        seen = dict(report.user_properties).get("drill")
        seen = seen if isinstance(seen, dict) else {}
        seen = {"point": point, "stop": stop, "protocol": protocol} | seen
        _found[report.nodeid] = (tier, seen["point"], seen["stop"], seen)


def parameters(nodeid: str) -> tuple[str, str, str]:
    """The point, stop and protocol a drill's test id names (see the module's doc)."""
    params = re.search(r"\[(.*)\](?:@[\w.-]+)?$", nodeid)  # @group: xdist's
    parts = params.group(1).split("-") if params else []
    protocol = next((part for part in parts if part in PROTOCOLS), "v1")
    point, _, stop = "-".join(part for part in parts if part not in PROTOCOLS).partition("-")
    return point, stop, protocol


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node: Any, ids: list[str]) -> None:
    """The controller's order of the tests, each worker having collected them all."""
    if not _order:
        _order.update((nodeid, index) for index, nodeid in enumerate(ids))


def table() -> list[tuple[str, ...]]:
    ran = sorted(_found, key=lambda nodeid: _order.get(nodeid, len(_order)))
    return [
        (
            tier,
            point,
            stop,
            seen["protocol"],
            seen.get("held", "-"),
            seen.get("end", "-"),
            _outcome[nodeid],
        )
        for nodeid in ran
        if nodeid in _outcome
        for tier, point, stop, seen in [_found[nodeid]]
    ]


def markdown(rows: list[tuple[str, ...]]) -> str:
    lines = ["| " + " | ".join(HEADER) + " |", "|" + " --- |" * len(HEADER)]
    return "\n".join([*lines, *("| " + " | ".join(row) + " |" for row in rows)])


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    rows = table()
    if not rows or hasattr(config, "workerinput"):
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
