"""`crw flow import RUN --db URL` and `crw flow export RUN [--to FILE]`: a run's
journal moved between its file and PostgreSQL, verbatim, checked, and only while no
process holds it. Real `crw` processes on a throwaway PostgreSQL cluster."""

from __future__ import annotations

import json

import psycopg

from crw.engine.config.workflow import load_workflow
from crw.engine.run.locks import run_lock
from crw.engine.run.rundir import RunDir
from crw.engine.run.runspec import RunSpec, WorkflowRef, write_run_spec
from crw.journal.log import encode_batch, encode_body
from crw.journal.postgres import ensure_schema
from crw.journal.rows import Ended, RowModel, Started
from crw.journal.stores import DB_MEMBER
from tests.cli.conftest import Crw, Result
from tests.cli.test_dispatched import WORKFLOW

AT = "2026-12-06T14:00:00.000000Z"


def _flow(crw: Crw, *args: str) -> Result:
    return crw("flow", *args, "--state", str(crw.state))


def _run(crw: Crw, run_id: str) -> RunDir:
    """An ended run of WORKFLOW whose journal file holds batches of varied text."""
    run = RunDir.of(crw.state, run_id)
    run.create()
    ref = WorkflowRef(path=str(WORKFLOW), digest=load_workflow(WORKFLOW).digest)
    write_run_spec(run.run_json, RunSpec(id=run_id, workflow=ref, backend="session", pool=2))
    texts = ["plain", "naïve ☃ — 東京", 'quote " and \\ back', "nl\nin"]
    batches: list[list[RowModel]] = [
        [Started.model_validate({"call": f"c{n}", "text": texts[(n + i) % 4]}) for i in range(k)]
        for n, k in enumerate([1, 3, 2, 1])
    ]
    batches.append([Ended(status="completed")])
    seq = 1
    with open(run.journal, "ab") as journal:
        for rows in batches:
            journal.write(encode_batch(seq, AT, [encode_body(row) for row in rows]))
            seq += len(rows)
    return run


def _db_lines(url: str, run: str) -> list[bytes]:
    with psycopg.connect(url) as conn:
        try:
            found = conn.execute(
                b"SELECT line FROM crw_journal WHERE run = %s ORDER BY seq", (run,)
            ).fetchall()
        except psycopg.errors.UndefinedTable:
            return []
    return [bytes(line) for (line,) in found]


def _shown(crw: Crw, run: str) -> tuple[str, dict[str, object]]:
    show = _flow(crw, "show", run, "--json")
    status = _flow(crw, "status", run, "--json")
    assert show.code == 0 and status.code == 0, show.stderr + status.stderr
    return show.stdout, status.json()


def test_a_run_moves_to_postgres_and_back_byte_for_byte(crw: Crw, postgres_url: str) -> None:
    """import: every row in the database verbatim, run.json names
    it, the file emptied, and show and status read the same as from the file;
    export: the file holds the same bytes again, run.json names no database, the
    rows are gone from it; --to copies the journal and changes nothing."""
    run = _run(crw, "r-move")
    before = run.journal.read_bytes()
    shown = _shown(crw, run.id)

    said = _flow(crw, "import", run.id, "--db", postgres_url)
    assert said.code == 0, said.stderr
    assert said.stdout.startswith(f"run {run.id}: 8 rows moved to the PostgreSQL database t")
    assert _flow(crw, "export", run.id).code == 0
    moved = _flow(crw, "import", run.id, "--db", postgres_url, "--json")
    assert moved.code == 0, moved.stderr
    assert moved.json()["rows"] == 8 and moved.json()["bytes"] == len(before)
    assert json.loads(run.run_json.read_text())[DB_MEMBER] == postgres_url
    assert b"".join(_db_lines(postgres_url, run.id)) == before
    assert run.journal.read_bytes() == b""
    assert _shown(crw, run.id) == shown
    assert _db_snapshots(postgres_url) == [run.id]  # status kept the ended run's there

    copy = run.root.parent / "copy.jsonl"
    copied = _flow(crw, "export", run.id, "--to", str(copy))
    assert copied.code == 0, copied.stderr
    assert copy.read_bytes() == before
    assert json.loads(run.run_json.read_text())[DB_MEMBER] == postgres_url

    back = _flow(crw, "export", run.id)
    assert back.code == 0, back.stderr
    assert run.journal.read_bytes() == before
    assert DB_MEMBER not in json.loads(run.run_json.read_text())
    assert _db_lines(postgres_url, run.id) == []
    assert _db_snapshots(postgres_url) == []
    assert _shown(crw, run.id) == shown


def _db_snapshots(url: str) -> list[str]:
    with psycopg.connect(url) as conn:
        return [str(run) for (run,) in conn.execute(b"SELECT run FROM crw_snapshots").fetchall()]


def test_a_damaged_line_is_refused_by_its_seq_and_nothing_moves(
    crw: Crw, postgres_url: str
) -> None:
    """A line whose checksum fails (a byte changed in it, seq 3): refused naming
    seq 3; run.json and the file unchanged, no row in the database."""
    run = _run(crw, "r-damaged")
    lines = run.journal.read_bytes().splitlines(keepends=True)
    lines[2] = lines[2].replace(b'"call":"c1"', b'"call":"cX"')
    run.journal.write_bytes(b"".join(lines))
    spec = run.run_json.read_bytes()

    refused = _flow(crw, "import", run.id, "--db", postgres_url)
    assert refused.code == 1
    assert f"run {run.id}'s journal is damaged at seq 3 (" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    assert run.run_json.read_bytes() == spec
    assert run.journal.read_bytes() == b"".join(lines)
    assert _db_lines(postgres_url, run.id) == []


def test_a_run_a_process_holds_is_not_moved(crw: Crw, postgres_url: str) -> None:
    """The run lock held (a run process): import refused, and so is export of the
    run once it is in the database; nothing moves either way."""
    run = _run(crw, "r-held")
    before = run.journal.read_bytes()
    with run_lock(run):
        refused = _flow(crw, "import", run.id, "--db", postgres_url)
    assert refused.code == 1
    assert f"run {run.id} is live: a process holds its run.lock" in refused.stderr
    assert _db_lines(postgres_url, run.id) == [] and run.journal.read_bytes() == before

    assert _flow(crw, "import", run.id, "--db", postgres_url).code == 0
    with run_lock(run):
        refused = _flow(crw, "export", run.id)
    assert refused.code == 1 and "is live" in refused.stderr
    assert json.loads(run.run_json.read_text())[DB_MEMBER] == postgres_url
    assert b"".join(_db_lines(postgres_url, run.id)) == before


def test_a_run_another_machine_holds_is_not_moved_back(crw: Crw, postgres_url: str) -> None:
    """Another machine's writer holds the run's lease: export is refused naming it."""
    run = _run(crw, "r-lease")
    assert _flow(crw, "import", run.id, "--db", postgres_url).code == 0
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(
            b"INSERT INTO crw_runs VALUES (%s, 7, 'far-box', now() + interval '1 hour')",
            (run.id,),
        )
    refused = _flow(crw, "export", run.id)
    assert refused.code == 1
    assert f"run {run.id} is held by machine far-box until" in refused.stderr
    assert json.loads(run.run_json.read_text())[DB_MEMBER] == postgres_url
    assert run.journal.read_bytes() == b""


def test_run_json_names_the_database_only_once_it_holds_every_row(
    crw: Crw, postgres_url: str
) -> None:
    """The database holds other rows of the run: the copy is refused and run.json
    still names the file. It holds these very rows (a move that stopped after the
    copy, before run.json): the move goes on and completes."""
    run = _run(crw, "r-order")
    before = run.journal.read_bytes()
    ensure_schema(postgres_url)
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(b"INSERT INTO crw_journal VALUES (%s, 1, 0, 'other')", (run.id,))
    refused = _flow(crw, "import", run.id, "--db", postgres_url)
    assert refused.code == 1 and "already holds other rows of run r-order" in refused.stderr
    assert DB_MEMBER not in json.loads(run.run_json.read_text())
    assert run.journal.read_bytes() == before

    lines = before.splitlines(keepends=True)
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(b"DELETE FROM crw_journal")
        at = 0
        for seq, line in enumerate(lines, 1):
            conn.execute(
                b"INSERT INTO crw_journal VALUES (%s, %s, %s, %s)", (run.id, seq, at, line)
            )
            at += len(line)
    moved = _flow(crw, "import", run.id, "--db", postgres_url)
    assert moved.code == 0, moved.stderr
    assert json.loads(run.run_json.read_text())[DB_MEMBER] == postgres_url
    assert b"".join(_db_lines(postgres_url, run.id)) == before
