"""`crw.journal.pg_query`: one statement through psycopg's libpq wrapper alone,
its columns decoded from binary; psycopg whole once anything asks the package for
more, with the submodules already loaded. Each case runs in a fresh interpreter
(this one imported psycopg whole already). Real PostgreSQL (tests/postgres.py)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

PROBE = textwrap.dedent(
    """
    import sys
    from crw.journal.pg_query import UndefinedTable, as_bool, as_int, as_text, query

    url = sys.argv[1]
    (row,) = query(url, "SELECT $1::bigint, $2::text, true, $3::bytea, NULL::text",
                   ["-5", "naïve", bytes([0, 255])], "read")
    assert (as_int(row[0]), as_text(row[1]), as_bool(row[2]), row[3], row[4]) == (
        -5, "naïve", True, bytes([0, 255]), None), row
    assert "psycopg.connection" not in sys.modules
    try:
        query(url, "SELECT 1 FROM no_such_table", [], "read")
    except UndefinedTable:
        pass
    else:
        raise AssertionError("no UndefinedTable")
    try:
        query(url, "SELECT 1/0", [], "read")
    except OSError as err:
        assert "could not read the PostgreSQL database" in str(err), err
        assert "division by zero" in str(err), err
    errors, pq = sys.modules["psycopg.errors"], sys.modules["psycopg.pq"]
    import psycopg

    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT 2").fetchone() == (2,)
    assert psycopg.errors is errors and psycopg.pq is pq
    assert issubclass(psycopg.errors.UndefinedTable, psycopg.Error)
    print("ok")
    """
)


def test_a_statement_through_the_libpq_wrapper_then_psycopg_whole(postgres_url: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, postgres_url],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert (done.returncode, done.stdout) == (0, "ok\n"), done.stderr


def test_a_database_that_does_not_answer_is_one_oserror() -> None:
    probe = (
        "from crw.journal.pg_query import query\n"
        "try:\n"
        "    query('postgresql://crw@/x?host=/nonexistent-crw&port=1', 'SELECT 1', [], 'read')\n"
        "except OSError as err:\n"
        "    print(err.strerror.split(':')[0])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert done.stdout == "could not connect to the PostgreSQL database x on /nonexistent-crw\n", (
        done.stderr
    )
