"""`crw flow status`, `crw flow schema rows`, `crw flow demo` and the CLI's errors."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema  # type: ignore[import-untyped]
import pytest

from crw.engine.run import locks
from crw.engine.run.rundir import RunDir
from crw.journal.log import encode_batch, encode_body, read_journal
from crw.journal.rows import UnknownRow
from tests.cli.conftest import EXAMPLES, Crw, wait_for_exit

WORKFLOW = str(EXAMPLES / "fix-issue.toml")


def _journal_line(seq: int, row: str, **fields: object) -> str:
    """One row as a batch of its own, in the framing of crw.journal.log."""
    body = encode_body(UnknownRow.model_validate({"row": row, **fields}))
    return encode_batch(seq, "2026-11-29T00:00:00.000000Z", [body]).decode()


def test_status_json_shows_the_run_and_each_call(crw: Crw) -> None:
    out = crw.start(WORKFLOW, "--owner", "o").json()
    run = RunDir(Path(out["run_dir"]))
    wait_for_exit(run.root)  # its host is not there: started, then paused
    # A call's rows, appended as whole batches (the framing of crw.journal.log).
    with open(run.journal, "a") as journal:
        journal.write(
            _journal_line(3, "prepared", call="explore.1", node="explore", role="explorer")
        )
        journal.write(
            _journal_line(
                4, "completed", call="explore.1", tokens={"input": 9, "output": 3, "total": 12}
            )
        )
    result = crw("flow", "status", out["run"], "--state", str(crw.state), "--json")
    assert result.code == 0, result.stderr
    status = result.json()
    assert status["run"] == out["run"] and status["state"] == "paused"
    assert status["holder_pid"] is None  # the run process stopped
    assert status["calls"] == [
        {
            "call": "explore.1",
            "node": "explore",
            "role": "explorer",
            "state": "completed",
            "attempts": 0,
            "turns": 0,
            "tokens": {
                "input": 9,
                "cached_input": 0,
                "output": 3,
                "reasoning_output": 0,
                "total": 12,
            },
            "started_at": "2026-11-29T00:00:00.000000Z",
            "ended_at": "2026-11-29T00:00:00.000000Z",
            "seconds": 0.0,
            "reason": None,
        }
    ]
    human = crw("flow", "status", out["run"], "--state", str(crw.state))
    assert "explore.1" in human.stdout and "completed" in human.stdout
    assert "no process holds it" in human.stdout


def test_status_of_a_torn_journal_drops_the_torn_batch_and_warns_once(crw: Crw) -> None:
    out = crw.start(WORKFLOW, "--owner", "o").json()
    run = RunDir(Path(out["run_dir"]))
    wait_for_exit(run.root)
    with open(run.journal, "a") as journal:
        journal.write(_journal_line(3, "prepared", call="a.1")[:-9])
    result = crw("flow", "status", out["run"], "--state", str(crw.state), "--json")
    assert result.code == 0
    assert result.json()["calls"] == []
    assert result.stderr.count("crw: warning:") == 1
    assert "torn" in result.stderr and str(run.journal) in result.stderr


def test_a_torn_tail_of_a_run_a_process_holds_is_no_warning(
    crw: Crw, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The batch a live run's process is writing this moment reads as a torn
    tail: status and next of a run whose lock is held show the rows before it and
    warn of nothing (a run no process holds is warned about, as above). The test
    holds the run as the process its started row names would (its process lock,
    then the run lock), so next answers at once rather than reading a holder that
    is still coming up for its 15 s."""
    out = crw.start(WORKFLOW, "--owner", "o").json()
    run = RunDir(Path(out["run_dir"]))
    wait_for_exit(run.root)
    started = [row for row in read_journal(run.journal).rows if row["row"] == "started"]
    monkeypatch.setattr(locks, "_new_token", lambda: started[-1]["process"])
    with open(run.journal, "a") as journal:
        journal.write(_journal_line(3, "prepared", call="a.1")[:-9])
    with locks.hold_run(run):
        for command in ("status", "next"):
            result = crw("flow", command, out["run"], "--state", str(crw.state), "--json")
            assert result.code == 0, result.stderr
            assert "torn" not in result.stderr and "warning" not in result.stderr


def test_status_of_a_journal_damaged_in_the_middle_shows_the_run_corrupt(crw: Crw) -> None:
    """Damage with whole rows after it: status names the file, the byte and what
    to do, shows the calls as the rows before the damage leave them, and changes
    nothing."""
    out = crw.start(WORKFLOW, "--owner", "o").json()
    run = RunDir(Path(out["run_dir"]))
    wait_for_exit(run.root)
    with open(run.journal, "a") as journal:
        journal.write(_journal_line(3, "prepared", call="explore.1", node="explore"))
        damaged_at = journal.tell()
        journal.write(
            _journal_line(4, "completed", call="explore.1").replace("completed", "c0mpleted")
        )
        whole_at = journal.tell()
        journal.write(_journal_line(5, "prepared", call="build.1", node="build"))
    before = run.journal.read_bytes()
    result = crw("flow", "status", out["run"], "--state", str(crw.state), "--json")
    assert result.code == 0, result.stderr
    status = result.json()
    assert status["state"] == "corrupt"
    corrupt = status["corrupt"]
    assert (corrupt["journal"], corrupt["offset"]) == (str(run.journal), damaged_at)
    assert corrupt["valid_at"] == whole_at
    assert corrupt["damage"].startswith(f"journal {run.journal} is damaged at byte {damaged_at} (")
    assert "kept as it is" in corrupt["fix"]
    assert [(c["call"], c["state"]) for c in status["calls"]] == [("explore.1", "prepared")]
    human = crw("flow", "status", out["run"], "--state", str(crw.state))
    assert human.code == 0
    assert f"run {out['run']}: corrupt" in human.stdout
    assert f"{run.journal} is damaged at byte {damaged_at}" in human.stdout
    assert "restore the journal from a backup" in human.stdout
    assert run.journal.read_bytes() == before


def test_status_of_an_unknown_run_is_an_input_error(crw: Crw) -> None:
    result = crw("flow", "status", "no-such-run", "--state", str(crw.state), "--json")
    assert result.code == 2
    assert "no-such-run" in result.error() and result.error().count("\n") == 1
    assert result.error().endswith(f"list the runs with: crw flow list --state {crw.state}\n")


def test_schema_rows_prints_a_valid_json_schema_of_every_kind(crw: Crw) -> None:
    result = crw("flow", "schema", "rows", "--json")
    assert result.code == 0
    schema = result.json()
    jsonschema.Draft202012Validator.check_schema(schema)
    text = json.dumps(schema)
    for kind in ("started", "step_published", "thread_started", "step_unwritten", "ended"):
        assert f'"{kind}"' in text


def test_unknown_option_is_an_input_error(crw: Crw) -> None:
    result = crw("flow", "status", "--frobnicate")
    assert result.code == 2 and result.stderr.startswith("crw: error:")


def test_help_lists_the_flow_commands(crw: Crw) -> None:
    result = crw("flow", "--help")
    assert result.code == 0
    for command in ("start", "status", "schema", "demo"):
        assert command in result.stdout
    assert "_run" not in result.stdout


def test_status_of_a_run_of_many_calls_summarises_unless_asked_for_all(crw: Crw) -> None:
    """A run of many calls stays readable: counts by state, the calls not
    completed, the last calls; --all lists every call and --json keeps them all."""
    out = crw.start(WORKFLOW, "--owner", "o").json()
    run = RunDir(Path(out["run_dir"]))
    wait_for_exit(run.root)
    seq = 3
    with open(run.journal, "a") as journal:
        for n in range(200):
            call = f"n{n}.1"
            journal.write(_journal_line(seq, "prepared", call=call, node=f"n{n}", role="executor"))
            end = "held" if n in (7, 150) else "completed"
            journal.write(_journal_line(seq + 1, end, call=call, reason="no answer"))
            seq += 2
    args = ("flow", "status", out["run"], "--state", str(crw.state))
    human = crw(*args).stdout.splitlines()
    assert "  200 calls: completed 198, held 2" in human
    assert "  not completed (2):" in human
    assert sum(line.startswith(("  n7.1 ", "  n150.1 ")) for line in human) == 2
    answer = f"crw flow answer {out['run']} n7.1 --retry --state {crw.state}"
    assert f"    held (no answer): answer with {answer} (or --skip, --abort, --restart)" in human
    assert sum(" n199.1 " in line for line in human) == 1 and " n100.1 " not in "".join(human)
    assert len(human) < 40  # a summary, not 200 rows (head lines fold with the temp path)
    every = crw(*args, "--all").stdout
    assert all(f" n{n}.1 " in every for n in range(200))
    assert len(crw(*args, "--json").json()["calls"]) == 200
