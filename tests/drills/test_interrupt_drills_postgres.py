"""The interrupt drills, in process, on a run whose journal is in PostgreSQL
(tests/postgres.py's throwaway cluster): each journal of the drill (the reference
run's and the stopped run's) is a run of the database, its writer the store's
(a lease taken at each `go`, every group commit one fenced transaction), and
every read of the drill reads the database's rows.

The cases are those whose commits differ (tests/drills/test_interrupt_drills.py
has every point, stop and protocol on the journal file): the run cut right
after the stop's first row is committed, once for each kind that row can be
(the hold of a call with no turn, `dispatch`; the interrupt's intent of a
running turn, `running`; the bound turn the host answers while no process runs,
then the intent, `answered`), each resumed from the database's rows alone; a
cancel, whose cancelled and ended rows end the run; and a deadline, whose
`answer --retry` row is committed while no writer holds the run (`crw flow
answer`'s own append). A pause, a repair or a review turn stop through the same
rows as these; the protocol (v1, v2) changes the host's calls, not the journal's.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from trio.testing import MockClock

from crw.journal import stores
from crw.journal.postgres import PostgresJournal
from crw.journal.store import JournalStore
from tests.drills.scenes import POINTS, Point
from tests.drills.test_interrupt_drills import OPS
from tests.drills.test_interrupt_drills import (
    test_a_call_stopped_at_each_point_of_its_life_ends_as_the_undisturbed_run as stopped_drill,
)

pytestmark = pytest.mark.xdist_group("test_interrupt_drills_postgres")
"""One xdist worker runs the whole module: its tests share the cluster."""

CHOSEN = {
    ("dispatch", "kill"), ("running", "kill"), ("answered", "kill"),
    ("running", "cancel"), ("running", "timeout"),
}  # fmt: skip
CASES = [(point, op) for point in POINTS for op in OPS if (point.name, op) in CHOSEN]


class _OnPostgres(dict[Path, JournalStore]):
    """The stores this process knows (`crw.journal.stores._known`), where each
    journal under `root` is a run of the database at `url`, named by its place."""

    def __init__(self, url: str, root: Path) -> None:
        super().__init__()
        self.url, self.root = url, root

    def get(self, journal: Path, default: Any = None) -> Any:
        found = super().get(journal)
        if found is None and journal.is_relative_to(self.root):
            run = "-".join(journal.parent.relative_to(self.root).parts)
            found = self[journal] = PostgresJournal(self.url, run, journal)
        return found if found is not None else default


@pytest.fixture
def on_postgres(
    tmp_path: Path, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[None]:
    """Every journal of the test's directory kept in the test's database."""
    monkeypatch.setattr(stores, "_known", _OnPostgres(postgres_url, tmp_path))
    yield


@pytest.mark.parametrize(("point", "op"), CASES, ids=[f"{p.name}-{op}" for p, op in CASES])
async def test_a_call_on_postgres_stopped_at_a_point_ends_as_the_undisturbed_run(
    tmp_path: Path,
    autojump_clock: MockClock,
    point: Point,
    op: str,
    found: dict[str, Any],
    on_postgres: None,
) -> None:
    """spec: HARV-28..38, ROWS-6, ATT-30..35 (on the PostgreSQL store)"""
    await stopped_drill(tmp_path, autojump_clock, point, op, "v1", found)
    journals = {
        tmp_path / "reference" / "run" / "journal.jsonl",
        tmp_path / "run" / "journal.jsonl",
    }
    assert set(stores._known) == journals
    assert [p for p in journals if os.stat(p).st_size] == []  # every row in PostgreSQL
