"""The kill drills on a run whose journal is in PostgreSQL (tests/postgres.py's
throwaway cluster): the run process SIGKILLs itself right after the stop's first
row is committed, and the command that stops the run, or the resume after it,
takes the run again (its writer's lease, a new epoch) and ends it as the
undisturbed run, from the database's rows alone.

The cases are one a kill point (tests/drills/test_kill_drills.py has them all on
the journal file): the interrupt's intent committed and the process gone
(`running-pause`: the stop's command launches the process that takes the run
and commits the hold), and the bound turn's row committed and the host
answering the turn while no process runs (`answered-pause`: the resumed process
reads the answer and commits it before the pause). A cancel, a deadline, a
repair turn and a review turn die after the same row as `running-pause`
(`interrupt_requested`): on PostgreSQL they would prove the same commits again
(the deadline's `answer --retry` row, committed while no process holds the run,
is the in-process drills' `running-timeout` on PostgreSQL, without its 30 s wait).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.drills.test_kill_drills import CASES, Case, KillDrill, References
from tests.drills.test_kill_drills import drill as drill  # the fixture: a served sim host
from tests.drills.test_kill_drills import fresh as fresh  # the fixture: another drill
from tests.drills.test_kill_drills import references as references  # the undisturbed runs'
from tests.drills.test_kill_drills import (
    test_a_run_killed_as_it_stops_a_call_ends_as_the_undisturbed_run as killed_drill,
)

pytestmark = pytest.mark.xdist_group("test_kill_drills_postgres")
"""One xdist worker runs the whole module: its tests share the references and the cluster."""


@pytest.fixture
def multi_agent() -> str:
    """The drill's protocol: v1 (the store changes no call to the host, v2 neither)."""
    return "v1"


ON_POSTGRES = [
    c for c in CASES if (c.point, c.stop) in {("running", "pause"), ("answered", "pause")}
]


@pytest.mark.parametrize("case", ON_POSTGRES, ids=[f"{c.point}-{c.stop}" for c in ON_POSTGRES])
def test_a_run_on_postgres_killed_as_it_stops_a_call_ends_as_the_undisturbed_run(
    drill: KillDrill,
    fresh: Callable[[str], KillDrill],
    references: References,
    case: Case,
    found: dict[str, Any],
    postgres_url: str,
    multi_agent: str,
) -> None:
    """spec: HARV-28..31, HARV-35, HARV-37, HARV-38, ROWS-6, ATT-30, CMD-NEXT-2 (on
    the PostgreSQL store)"""
    drill.crw.env["CRW_DB"] = postgres_url
    killed_drill(
        drill=drill,
        fresh=fresh,
        references=references,
        case=case,
        multi_agent=multi_agent,
        found=found,
    )
    assert drill.run is not None and drill.run.journal.stat().st_size == 0  # all in PostgreSQL
