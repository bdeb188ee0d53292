"""A run whose journal is in PostgreSQL (`--db`, CRW_DB): real processes (the run's,
the drill's owner, each command) on a `crw host sim serve` host and a throwaway
PostgreSQL cluster (tests/postgres.py); every command finds the store in run.json."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import psycopg

from crw.cli.read.follow import RunWake
from crw.engine.run.launch import Launch
from crw.engine.run.rundir import RunDir
from crw.journal.log import encode_batch, encode_body
from crw.journal.rows import Started, UnknownRow
from crw.journal.stores import DB_MEMBER, store_at
from tests.cli.conftest import Crw
from tests.deadlines import AT_ONCE_WAIT, LOADED
from tests.drill.test_crash_drill import Drill
from tests.drill.test_crash_drill import drill as drill  # the fixture: a served sim host


def _pg_rows(url: str, run: str) -> list[bytes]:
    with psycopg.connect(url) as conn:
        found = conn.execute(
            b"SELECT line FROM crw_journal WHERE run = %s ORDER BY seq", (run,)
        ).fetchall()
    return [bytes(line) for (line,) in found]


def test_a_run_on_postgres_runs_to_its_end_and_every_command_reads_it(
    drill: Drill, postgres_url: str
) -> None:
    """spec: CMD-START. Started with --db: the start sees its started row, run.json
    names the database, every row is in PostgreSQL (the run's journal.jsonl stays
    empty), and status, show and list, each a new process, read the run from there."""
    out = drill.crw.start(
        str(drill.workflow), "--owner", drill.owner_thread, "--host", f"unix:{drill.socket}",
        "--db", postgres_url,
    )  # fmt: skip
    assert out.code == 0, out.stderr
    assert out.json()["started"] is True
    drill.run = RunDir(Path(out.json()["run_dir"]))
    drill.owner = drill.spawn(
        "tests.drill.owner", drill.run.id, "--state", str(drill.crw.state),
        "--socket", str(drill.socket), "--owner", drill.owner_thread,
        "--control", str(drill.control),
    )  # fmt: skip
    drill.run_deadline = LOADED
    rows = drill.finish()
    assert drill.run is not None
    run = drill.run.id
    assert json.loads(drill.run.run_json.read_text())[DB_MEMBER] == postgres_url
    assert drill.run.journal.stat().st_size == 0
    lines = _pg_rows(postgres_url, run)
    assert len(lines) == len(rows) and rows[-1]["row"] == "ended"
    assert [json.loads(line)["seq"] for line in lines] == list(range(1, len(rows) + 1))

    state = ("--state", str(drill.crw.state))
    status = drill.crw("flow", "status", run, *state, "--json")
    assert status.code == 0, status.stderr
    assert (status.json()["state"], status.json()["ended_status"]) == ("ended", "completed")
    show = subprocess.run(  # not drill.crw: its rows name pids, which it would take as its own
        [sys.executable, "-m", "crw", "flow", "show", run, *state, "--json"],
        env=drill.crw.env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert show.returncode == 0, show.stderr
    shown = [json.loads(line) for line in show.stdout.splitlines()]
    assert [row["seq"] for row in shown] == [row["seq"] for row in rows]
    assert shown[-1]["row"] == "ended" and shown[0]["row"] == "started"
    listed = drill.crw("flow", "list", *state, "--json")
    assert listed.code == 0, listed.stderr
    entries = {entry["run"]: entry for entry in listed.json()["runs"]}
    assert (entries[run]["state"], entries[run]["reason"]) == ("ended", "completed")
    assert entries[run]["calls"]["done"] == entries[run]["calls"]["total"] == 3
    done = next(row for row in rows if row["row"] == "completed")
    call = drill.crw("flow", "call", run, done["call"], *state, "--json")
    assert call.code == 0, call.stderr
    assert (call.json()["state"], call.json()["answer"]["result"]) == (
        "completed",
        done["result"],
    )
    shown_seqs = {row["seq"] for row in call.json()["rows"]}
    assert {row["seq"] for row in rows if row.get("call") == done["call"]} <= shown_seqs


def test_start_with_a_db_that_is_not_postgresql_is_refused_and_makes_nothing(crw: Crw) -> None:
    """A --db that is no PostgreSQL URL: one line saying what to give, exit 2, no run."""
    workflow = Path(__file__).resolve().parents[2] / "crw" / "examples" / "fix-issue.toml"
    result = crw.start(str(workflow), "--owner", "o", "--db", "mysql://x/y")
    assert result.code == 2
    said = result.json()
    assert said["error"] == "--db 'mysql://x/y' is not a PostgreSQL URL"
    assert said["fix"].startswith("give postgresql://USER@HOST/DATABASE")
    assert not (crw.state / "flow").exists() or not list((crw.state / "flow").iterdir())


def test_start_with_a_database_that_does_not_answer_is_refused_and_makes_nothing(crw: Crw) -> None:
    """A PostgreSQL URL whose server is not there: one line naming it, exit 1, no run."""
    workflow = Path(__file__).resolve().parents[2] / "crw" / "examples" / "fix-issue.toml"
    url = f"postgresql://crw@/none?host={crw.state.parent}&port=1"
    result = crw.start(str(workflow), "--owner", "o", "--db", url)
    assert result.code == 1, result.stdout
    said = json.dumps(result.json())
    assert "could not connect to the PostgreSQL database none" in said
    assert "start the database or fix --db / CRW_DB" in said
    assert not (crw.state / "flow").exists() or not list((crw.state / "flow").iterdir())


def test_a_live_view_wakes_on_the_notify_of_its_runs_commit(
    tmp_path: Path, postgres_url: str
) -> None:
    """`show --follow` and `watch` sleep on RunWake: for a run in PostgreSQL it wakes
    on the NOTIFY its commit sent (no journal file changes), not a safety wake."""
    runs = []
    for run_id in ("r1", "r2"):
        run = RunDir.of(tmp_path / "state", run_id)
        run.root.mkdir(parents=True)
        run.run_json.write_text(json.dumps({"id": run_id, DB_MEMBER: postgres_url}))
        runs.append(run)
    appenders = [store_at(run.journal).open_appender() for run in runs]
    body = encode_body(Started.model_validate({"call": "c"}))
    with RunWake(runs[0]) as wake:
        appenders[1].append(encode_batch(1, "2026-12-06T00:00:00Z", [body]), 1)  # another run's
        appenders[0].append(encode_batch(1, "2026-12-06T00:00:00Z", [body]), 1)
        began = time.monotonic()
        wake.wait(AT_ONCE_WAIT)  # the safety wake's bound, made long
        assert time.monotonic() - began < LOADED
    for appender in appenders:
        appender.close()


def test_a_launch_sees_its_started_row_in_postgresql(tmp_path: Path, postgres_url: str) -> None:
    """`resume --detach` and `next` wait for the launched process's started row
    (`Launch.settle`): read from the run's store, not its empty journal.jsonl."""
    run = RunDir.of(tmp_path / "state", "r1")
    run.root.mkdir(parents=True)
    run.run_json.write_text(json.dumps({"id": "r1", DB_MEMBER: postgres_url}))
    child = subprocess.Popen(["true"], stdin=subprocess.DEVNULL)
    child.wait()
    appender = store_at(run.journal).open_appender()
    row = encode_body(UnknownRow.model_validate({"row": "started", "pid": child.pid}))
    appender.append(encode_batch(1, "2026-12-06T00:00:00Z", [row]), 1)
    appender.close()
    launch = Launch(run, tmp_path / "state", child, 0, 0, 0)
    assert launch.settle(LOADED) == "started"
