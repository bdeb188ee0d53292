"""The torn-step drill: a run killed right after a step_published row, its step's
files then left as a power loss may leave them, resumes to the undisturbed run's
outcome.

A step's files are not synced (the row that announces it is durable first, and a
resumed process makes them again from it: crw.bus.steps). The run process is
SIGKILLed right after the first step_published row of build.1 (`CRW_CRASH_AFTER`,
before the files are written); while no process holds the run the drill writes
what a power loss in the middle of the write could leave: a torn packet and a
torn step file, or a whole step file beside a torn or missing packet. The
resumed run must end as the reference run does, with no turn started twice for
one marker, every packet whole as its row names it, and no subagent spawned on a
packet that was not (the owner reads each packet before it spawns). A power loss
that left neither file is the kill alone: the crash drill's `step_published` kill
point, which asserts the same of its packets (`assert_packets_whole`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from crw.bus import steps as bus
from crw.engine.steps import step_input
from crw.journal.rows import StepPublished
from tests.drill.test_crash_drill import (
    CALL,
    Drill,
    assert_packets_whole,
    drill,
    killed_and_resumed,
    reference,
    results,
)

__all__ = ["drill", "reference"]  # the crash drill's fixtures

pytestmark = pytest.mark.xdist_group("test_crash_drill")


def _step(d: Drill) -> StepPublished:
    row = [r for r in d.rows() if r["row"] == "step_published" and r["call"] == CALL][-1]
    return StepPublished.model_validate(row)


def _whole_step_file(d: Drill) -> None:
    """The step file as the dead process meant to write it, from its row."""
    assert d.run is not None
    step = _step(d)
    (d.run.steps / CALL).mkdir(mode=0o700, parents=True, exist_ok=True)
    bus.write_step_file(
        d.run,
        bus.StepFile(
            call=CALL,
            k=step.k or 1,
            attempt=step.attempt or 1,
            op=step.op or "",
            marker=step.marker or "",
            role=step.role or "",
            action="spawn",
            agent_type=step.agent_type or "",
            model=step.model,
            reasoning_effort=step.effort,
            message=step_input.of(step),
            packet=step.packet or "",
            workspace=step.workspace or "",
            agent_id=None,
        ),
    )


def _torn(path: Path, data: bytes) -> None:
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    path.write_bytes(data)


def both_torn(d: Drill) -> None:
    assert d.run is not None
    packet, step_file = bus.step_paths(d.run, CALL, 1, 1)
    _torn(packet, b"# Task\n\nFix the")
    _torn(step_file, b'{\n  "call": "build.1",\n  "k": 1')


def packet_torn(d: Drill) -> None:
    assert d.run is not None
    _torn(bus.step_paths(d.run, CALL, 1, 1)[0], b"")
    _whole_step_file(d)


def packet_gone(d: Drill) -> None:
    _whole_step_file(d)


LEFT: list[Any] = [
    pytest.param(both_torn, id="both_torn"),
    pytest.param(packet_torn, id="packet_torn"),
    pytest.param(packet_gone, id="packet_gone"),
]


@pytest.mark.parametrize("left", LEFT)
def test_a_step_a_power_loss_tore_is_made_again_from_its_row(
    drill: Drill, reference: dict[str, Any], left: Callable[[Drill], None]
) -> None:
    """spec: ATT-21, STEP-21, ATT-19, ATT-20"""
    rows = killed_and_resumed(drill, f"step_published@{CALL}", meanwhile=left)
    assert rows[-1]["row"] == "ended" and rows[-1]["status"] == "completed"
    assert results(rows) == reference
    turns, _ = drill.subagent_turns()
    twice = {marker: n for marker, n in turns.items() if n > 1}
    assert twice == {}, f"turns started twice for one marker: {twice}"
    assert_packets_whole(drill, rows)
