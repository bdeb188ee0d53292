"""The crash drill on a run whose journal is in PostgreSQL (tests/postgres.py's
throwaway cluster): killed right after each kill point's row is durable, resumed,
the same outcome as the file journal's uninterrupted run, no turn run twice.

One kill point a row kind (ON_POSTGRES): `step_published`, `turn_started` and
`completed`. The repair turn's `step_published#2` and `turn_started#2` die right
after rows of the same kinds, committed the same way (a group commit, the run
then taken again by the resumed process's writer): on the database they would
prove the same commits again, as the kill drills on PostgreSQL say of theirs
(docs/drills.md). What a resumed process does with a repair turn's rows is the
same whichever store read them to it (the store keeps the file's lines byte for
byte): the file drill plays both.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.drill.test_crash_drill import (
    CALL,
    KILL_POINTS,
    Drill,
    killed_and_resumed,
    results,
)
from tests.drill.test_crash_drill import drill as drill  # the fixture: a served sim host
from tests.drill.test_crash_drill import reference as reference  # the uninterrupted run's

pytestmark = pytest.mark.xdist_group("test_crash_drill_postgres")
"""One xdist worker runs the whole module: its tests share the reference run and the cluster."""


ON_POSTGRES = [point for point in KILL_POINTS if "#" not in str(point.id)]


@pytest.mark.parametrize("crash_after", ON_POSTGRES)
def test_a_run_on_postgres_killed_at_any_row_resumes_to_the_same_outcome(
    drill: Drill, reference: dict[str, Any], crash_after: str, postgres_url: str
) -> None:
    """spec: ATT-16, ATT-17, ATT-19, ATT-20, ATT-21 (on the PostgreSQL store)"""
    drill.crw.env["CRW_DB"] = postgres_url
    rows = killed_and_resumed(drill, crash_after)
    assert drill.run is not None and drill.run.journal.stat().st_size == 0  # all in PostgreSQL
    assert rows[-1]["row"] == "ended" and rows[-1]["status"] == "completed"
    assert results(rows) == reference
    turns, status = drill.subagent_turns()
    twice = {marker: n for marker, n in turns.items() if n > 1}
    assert twice == {}, f"turns started twice for one marker: {twice}"
    assert turns[f"{CALL}/t1-a1"] == 1 and turns[f"{CALL}/t2-a1"] == 1
    open_agents = {agent: s for agent, s in status.items() if s != "notLoaded"}
    assert open_agents == {}, f"subagents never closed (HARV-56): {open_agents}"
