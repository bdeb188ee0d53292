"""The crash drill inside a review round: real processes, a reviewed node's run
killed (SIGKILL) at each row of its review, fix and second review, resumed with
`crw flow resume`, must end as the uninterrupted run does, with no turn started
twice for one marker and every subagent closed (the drill of
`test_crash_drill`, on a workflow whose build node has one review round)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.drill.test_crash_drill import (
    WORKFLOW,
    Drill,
    drill_at,
    killed_and_resumed,
    results,
    served,
)

REVIEWED = WORKFLOW.replace(
    'task = "Fix it, starting from {explore.files}."\n',
    'task = "Fix it, starting from {explore.files}."\nreview = { role = "reviewer", rounds = 1 }\n',
)
REJECT = {"verdict": "reject", "findings": ["name the files"]}


@dataclass
class ReviewDrill(Drill):
    """The drill on the reviewed workflow: build.2 rejects, build.4 accepts."""

    run_deadline: float = 60.0
    """Twice the calls of the plain drill's run, on a machine under load."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.workflow.write_text(REVIEWED)

    def serve(self) -> None:
        super().serve()
        behaviour = {"seconds": 0.1, "answer": REJECT}
        self.host("sim/script", {"match": {"marker": "build.2/*"}, "behaviour": behaviour})


@pytest.fixture
def drill(tmp_path: Path) -> Iterator[ReviewDrill]:
    with served(drill_at(ReviewDrill, tmp_path)) as made:
        yield made


pytestmark = pytest.mark.xdist_group("test_review_crash_drill")
"""One xdist worker runs the whole module: its tests share the module's costly set-up."""


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The results of the uninterrupted run."""
    with served(drill_at(ReviewDrill, tmp_path_factory.mktemp("reference"))) as ran:
        ran.start(crash_after=None)
        rows = ran.finish()
    assert rows[-1]["row"] == "ended" and rows[-1]["status"] == "completed"
    assert set(results(rows)) == {f"build.{n}" for n in (1, 2, 3, 4)} | {"explore.1", "review.1"}
    return results(rows)


@pytest.mark.parametrize(
    "crash_after",
    [
        "completed@build.1",
        "completed@build.2",
        "step_published@build.3",  # its batch holds prepared (and checkpoint_started)
        "turn_started@build.4",
    ],
)
def test_a_run_killed_inside_a_review_round_resumes_to_the_same_outcome(
    drill: ReviewDrill, reference: dict[str, Any], crash_after: str
) -> None:
    """spec: ATT-39 (a fix first prepared by the resumed process takes the checkpoint branch)"""
    rows = killed_and_resumed(drill, crash_after)
    assert rows[-1]["row"] == "ended" and rows[-1]["status"] == "completed"
    assert results(rows) == reference
    turns, status = drill.subagent_turns()
    assert {marker: n for marker, n in turns.items() if n > 1} == {}
    assert {agent: s for agent, s in status.items() if s != "notLoaded"} == {}
    calls = [r["call"] for r in rows if r["row"] == "prepared"]
    assert calls.count("build.3") == 1 and calls.count("build.4") == 1
    checkpoints = [r for r in rows if r["row"] == "checkpoint_started"]
    resumed_first = crash_after in ("completed@build.1", "completed@build.2")
    assert [(r["call"], r["handle"]) for r in checkpoints] == (
        [("build.3", "build.1")] if resumed_first else []
    )
