"""`crw flow watch RUN` and `crw flow timeline RUN` of a run whose journal is in
PostgreSQL and whose directory is on another machine: read from the database as
`status` and `show` read it, no `resume` first, no directory made; a live run's
watch woken by the NOTIFY its commit sends. Two machines as two state
directories on one database, real `crw` processes on the throwaway cluster."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from crw.cli.read.follow import JournalTail
from crw.engine.run.rundir import RunDir
from crw.journal.postgres import PostgresJournal
from crw.journal.stores import forget_store, keep_store
from tests.cli.conftest import Crw
from tests.cli.test_move_journal import _flow, _run
from tests.cli.test_read_elsewhere import _on_a, _on_b

DEADLINE = 60.0
"""Seconds a condition may take on a loaded machine."""


def test_watch_and_timeline_read_a_run_only_the_database_keeps(
    crw: Crw, tmp_path: Path, postgres_url: str
) -> None:
    """Machine b, which has no directory of a's ended run, watches it (its view as
    a's, then exit 0) and draws its timeline (the picture a draws), and makes no
    directory of it."""
    run = _on_a(crw, postgres_url, "r-watch-away")
    b_state = tmp_path / "b-state"
    on_a = _flow(crw, "watch", run.id, "--json")
    assert on_a.code == 0, on_a.stderr

    on_b = _on_b(crw, b_state, postgres_url, "watch", run.id, "--json")
    assert (on_b.code, on_b.stdout) == (0, on_a.stdout), on_b.stderr
    assert json.loads(on_b.stdout.splitlines()[-1])["state"] == "ended"
    plain = _on_b(crw, b_state, postgres_url, "watch", run.id)
    assert plain.code == 0, plain.stderr
    assert f"-- run {run.id} ended: " in plain.stdout

    a_svg, b_svg = tmp_path / "a.svg", tmp_path / "b.svg"
    assert _flow(crw, "timeline", run.id, "--out", str(a_svg)).code == 0
    drawn = _on_b(crw, b_state, postgres_url, "timeline", run.id, "--out", str(b_svg), "--json")
    assert drawn.code == 0, drawn.stderr
    assert drawn.json()["live"] is False
    assert b_svg.read_bytes() == a_svg.read_bytes()
    assert not RunDir.of(b_state, run.id).root.exists()


@pytest.fixture
def children() -> Iterator[list[subprocess.Popen[str]]]:
    """The test's watch processes, killed by pid at teardown."""
    started: list[subprocess.Popen[str]] = []
    yield started
    for child in started:
        if child.poll() is None:
            os.kill(child.pid, signal.SIGKILL)
        child.wait()
        if child.stdout is not None:
            child.stdout.close()


def _line(child: subprocess.Popen[str]) -> str:
    """The child's next line of output, waited for up to DEADLINE."""
    assert child.stdout is not None
    ready, _, _ = select.select([child.stdout], [], [], DEADLINE)
    assert ready, "no line from watch"
    return child.stdout.readline()


def test_watch_of_a_live_run_elsewhere_wakes_on_its_commit(
    crw: Crw,
    tmp_path: Path,
    postgres_url: str,
    children: list[subprocess.Popen[str]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """b watches a's run while a's writer holds it: running, live; a's writer
    commits the run's last row (its NOTIFY in the commit's transaction), and b's
    watch shows the run ended and exits 0."""
    run = _run(crw, "r-watch-live")
    lines = run.journal.read_bytes().splitlines(keepends=True)
    run.journal.write_bytes(b"".join(lines[:-1]))  # no ended row: still running
    assert _flow(crw, "import", run.id, "--db", postgres_url).code == 0
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(b"INSERT INTO crw_runs VALUES ('r-watch-live', 2, 'a', now() + interval '1h')")
    b_state = tmp_path / "b-state"
    env = {k: v for k, v in crw.env.items() if k != "CRW_DB"}
    env |= {"CRW_MACHINE": "b", "CRW_DB": postgres_url}
    argv = [sys.executable, "-m", "crw", "flow", "watch", run.id, "--json", "--state", str(b_state)]
    child = subprocess.Popen(
        argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True
    )
    children.append(child)
    first = json.loads(_line(child))
    assert (first["state"], first["done"]) == ("running", 0)

    monkeypatch.setenv("CRW_MACHINE", "a")  # a's writer goes on and ends the run
    appender = PostgresJournal(postgres_url, run.id, run.journal).open_appender()
    try:
        appender.append(lines[-1], 1)
    finally:
        appender.close()
    deadline = time.monotonic() + DEADLINE
    shown = first
    while shown["state"] != "ended" and time.monotonic() < deadline:
        shown = json.loads(_line(child))
    assert shown["state"] == "ended"
    assert child.wait(timeout=DEADLINE) == 0
    assert not RunDir.of(b_state, run.id).root.exists()


def test_watch_of_a_run_whose_lease_lapsed_elsewhere_says_no_process_runs_it(
    crw: Crw, tmp_path: Path, postgres_url: str
) -> None:
    """a's run whose rows leave it running and whose writer's lease lapsed (a
    died): b's watch shows it crashed and exits 1 with show --follow's line."""
    run = _run(crw, "r-watch-lapsed")
    lines = run.journal.read_bytes().splitlines(keepends=True)
    run.journal.write_bytes(b"".join(lines[:-1]))
    assert _flow(crw, "import", run.id, "--db", postgres_url).code == 0
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(
            b"INSERT INTO crw_runs VALUES ('r-watch-lapsed', 2, 'a', now() - interval '1s')"
        )

    watched = _on_b(crw, tmp_path / "b-state", postgres_url, "watch", run.id, "--json")
    assert watched.code == 1
    assert json.loads(watched.stdout.splitlines()[-1])["state"] == "crashed"
    assert f"crw: no process runs run {run.id} (its rows leave it running)" in watched.stderr


def test_a_tail_of_a_run_in_the_database_reads_only_the_rows_after_it(
    crw: Crw, tmp_path: Path, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What `show --follow` and `watch` read at each wake of a run in the database:
    the rows from the offset read so far on (one query, handed out a piece at a
    time), never the journal from its start again."""
    run = _run(crw, "r-tail-by-seq")
    lines = run.journal.read_bytes().splitlines(keepends=True)
    run.journal.write_bytes(b"".join(lines[:-1]))
    assert _flow(crw, "import", run.id, "--db", postgres_url).code == 0
    asked: list[int] = []
    read_from = PostgresJournal.read_from

    def counted(store: PostgresJournal, offset: int) -> bytes:
        asked.append(offset)
        return read_from(store, offset)

    monkeypatch.setattr(PostgresJournal, "read_from", counted)
    elsewhere = tmp_path / "b-state" / "flow" / run.id / "journal.jsonl"  # no directory
    keep_store(elsewhere, PostgresJournal(postgres_url, run.id, elsewhere))
    try:
        tail = JournalTail(elsewhere)
        pieces = list(tail.pieces(size=len(lines[0]) + 1))
        assert (len(pieces) > 1, sum(map(len, pieces)), tail.last_seq) == (True, 7, 7)
        assert asked == [0]  # one query for every piece
        end = tail.offset
        assert (tail.read(), asked) == ([], [0, end])
        monkeypatch.setenv("CRW_MACHINE", "a")
        appender = PostgresJournal(postgres_url, run.id, run.journal).open_appender()
        try:
            appender.append(lines[-1], 1)
        finally:
            appender.close()
        assert [row["row"] for row in tail.read()] == ["ended"]
        assert asked == [0, end, end] and tail.ended
    finally:
        forget_store(elsewhere)
