"""The commands that read runs in a PostgreSQL database start cold, each a fresh
process: they send their one statement through psycopg's libpq wrapper alone
(`crw.journal.pg_query`: none of psycopg's connections, cursors and adapters)
and load no importlib.metadata (`crw.journal.pg_driver`: psycopg's version
modules would).
docs/performance.md, "The journal on PostgreSQL", says what each cut saved.
Real `crw` processes on a throwaway PostgreSQL cluster."""

from __future__ import annotations

import pytest

from tests.cli.conftest import Crw, imported
from tests.cli.test_move_journal import _flow, _run

DB_READ_NOT_NEEDED = (
    "importlib.metadata",
    "psycopg.connection",
    "psycopg.cursor",
    "psycopg.adapt",
    "psycopg.types",
)
"""What `list --db` and `status` of a database run need none of."""


@pytest.mark.parametrize("command", ["list", "status"])
def test_reading_database_runs_loads_only_psycopgs_libpq_wrapper(
    crw: Crw, postgres_url: str, command: str
) -> None:
    """`list --db` of the database's runs, and `status` of a run whose journal is
    there (the first, which keeps its snapshot there, and the next, which reads
    it), answer without any of DB_READ_NOT_NEEDED."""
    run = _run(crw, "r-cold")
    assert _flow(crw, "import", run.id, "--db", postgres_url).code == 0
    args = {
        "list": ("list", "--all", "--db", postgres_url),
        "status": ("status", run.id),
    }[command]
    for _ in range(2):
        result, modules = imported(crw, "flow", *args, "--state", str(crw.state), "--json")
        assert result.code == 0, result.stderr
        assert "psycopg.pq" in modules
        assert [m for m in modules if m.startswith(DB_READ_NOT_NEEDED)] == []
