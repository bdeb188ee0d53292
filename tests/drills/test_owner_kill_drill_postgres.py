"""The git demo's run process SIGKILLed again and again (tests/drills/
test_owner_kill_drill.py), its journal in PostgreSQL (tests/postgres.py's
throwaway cluster, $CRW_DB): the kills land at any moment, inside a group
commit's transaction too when one is under way (the kill drills' kill points
land only right after one), and each resume (or the owner's next) takes the run again, a new
epoch of its writer. No marker is spawned twice, and the demo ends with the
results of the same demo run undisturbed on PostgreSQL.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.cli.conftest import Crw
from tests.drills.test_owner_kill_drill import crw as crw  # the fixture: reaps by pid
from tests.drills.test_owner_kill_drill import (
    test_the_git_demo_spawns_no_marker_twice_across_kills_of_its_run_process as killed_demo,
)

pytestmark = pytest.mark.xdist_group("test_owner_kill_drill_postgres")
"""One xdist worker runs the module with the cluster it starts (as each PostgreSQL drill)."""


def test_the_git_demo_on_postgres_spawns_no_marker_twice_across_kills_of_its_run_process(
    crw: Crw, tmp_path: Path, found: dict[str, Any], postgres_url: str
) -> None:
    """spec: CMD-NEXT-18, ATT-16, ATT-18 (on the PostgreSQL store)"""
    crw.env["CRW_DB"] = postgres_url
    killed_demo(crw=crw, tmp_path=tmp_path, multi_agent="v1", found=found)
    journals = list(tmp_path.glob("state*/flow/*/journal.jsonl"))
    assert journals and [p for p in journals if p.stat().st_size] == []  # all in PostgreSQL
