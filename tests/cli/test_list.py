"""`crw flow list` of a finished, a running and a crashed run, real run processes
on a `crw host sim serve` host, and of an ended run older than a week."""

from __future__ import annotations

from typing import Any

from crw.engine.run.rundir import RunDir
from crw.journal.log import encode_batch, encode_body
from crw.journal.rows import UnknownRow
from tests.cli.conftest import Crw
from tests.cli.test_pause_cancel import HANG
from tests.cli.test_status_outcome import LOADED, crashed_run
from tests.drill.test_crash_drill import CALL, Drill, wait_until
from tests.drill.test_crash_drill import drill as drill  # the fixture: a served sim host


def old_ended_run(crw: Crw) -> str:
    """A run directory whose rows ended in January."""
    run = RunDir.of(crw.state, "old-20260101-000000-abcd")
    run.create()
    rows = [{"row": "started", "backend": "app-server"}, {"row": "ended", "status": "failed"}]
    with open(run.journal, "ab") as journal:
        for seq, row in enumerate(rows, start=1):
            body = encode_body(UnknownRow.model_validate(row))
            journal.write(encode_batch(seq, f"2026-01-01T00:00:0{seq}.000000Z", [body]))
    return run.id


def listed(crw: Crw, *args: str, env: dict[str, str] | None = None) -> Any:
    result = crw("flow", "list", "--state", str(crw.state), *args, env=crw.env | (env or {}))
    assert result.code == 0, result.stderr
    return result.json() if "--json" in args else result.stdout.splitlines()


def test_list_shows_each_run_newest_first_read_from_its_tail(drill: Drill) -> None:
    drill.start(crash_after=None)
    drill.run_deadline = LOADED  # the owner sees the end late on a loaded machine
    drill.finish()
    assert drill.run is not None
    finished = drill.run.id
    crashed = crashed_run(drill).id
    drill.host("sim/script", HANG)  # the next run's build works until interrupted
    drill.start(crash_after=None)
    running = drill.run.id
    wait_until("build's turn runs", lambda: any(
        r["row"] == "turn_started" and r.get("call") == CALL for r in drill.rows()
    ))  # fmt: skip
    pid = next(r["pid"] for r in drill.rows() if r["row"] == "started")
    old = old_ended_run(drill.crw)

    view = listed(drill.crw, "--json")
    assert view["hidden"] == 1  # the run ended in January
    runs = {entry["run"]: entry for entry in view["runs"]}
    assert list(runs) == [running, crashed, finished]
    assert [(e["state"], e["reason"], e["live"], e["calls"]) for e in runs.values()] == [
        ("running", None, True, {"done": 1, "total": 3, "in_flight": 1, "held": 0, "nodes": None}),
        ("crashed", None, False, {"done": 0, "total": 3, "in_flight": 0, "held": 0, "nodes": None}),
        ("ended", "completed", False,
         {"done": 3, "total": 3, "in_flight": 0, "held": 0, "nodes": {"completed": 3, "total": 3}}),
    ]  # fmt: skip
    assert runs[crashed]["rows_state"] == "waiting_session"
    resume = f"crw flow resume {crashed} --detach --state {drill.crw.state}"
    assert [e["resume"] for e in runs.values()] == [None, resume, None]
    assert runs[running]["pid"] == pid and runs[crashed]["pid"] is None
    assert {(e["workflow"], e["backend"], e["read"]) for e in runs.values()} == {
        ("drill", "session", "tail")
    }
    for run_id, entry in runs.items():
        status = drill.crw("flow", "status", run_id, "--state", str(drill.crw.state), "--json")
        full = status.json()
        assert (entry["state"], entry["tokens"]) == (full["state"], full["tokens"])
        assert (entry["started_at"], entry["last_at"]) == (full["started_at"], full["last_at"])
        assert entry["calls"] == full["progress"]
    assert runs[finished]["tokens"]["total"] > 0

    human = listed(drill.crw, env={"COLUMNS": "80"})
    assert max(len(line) for line in human[:4]) <= 80
    assert human[0].split() == ["RUN", "VIA", "STATE", "CALLS", "TOKENS", "LAST", "LIVE"]
    assert [line.split()[0] for line in human[1:4]] == [running, crashed, finished]
    assert human[1].split()[1:4] == ["sess", "running", "1/3"]
    assert human[1].endswith("yes")
    assert human[2].split()[2:4] == ["crashed", "0/3"] and human[2].endswith("no")
    assert human[3].split()[2:5] == ["ended", "(completed)", "3/3"]
    assert [line.split()[1:] for line in listed(drill.crw, env={"COLUMNS": "40"})[:2]] == [
        ["STATE"],
        ["running"],
    ]  # a narrow terminal: the run id and its state
    assert human[4:] == [
        "(1 ended runs older than 7 days not shown: --all lists them)",
        f"{crashed} crashed (its process is gone); go on with:",
        f"  {resume}",
        f"see one with: crw flow status RUN --state {drill.crw.state}",
    ]
    every = listed(drill.crw, "--json", "--all")
    assert [entry["run"] for entry in every["runs"]] == [running, crashed, finished, old]
    assert every["hidden"] == 0 and every["runs"][-1]["reason"] == "failed"


def test_list_of_an_empty_state_directory_says_how_to_start_one(crw: Crw) -> None:
    assert listed(crw, "--json") == {
        "state_dir": str(crw.state),
        "runs": [],
        "hidden": 0,
        "more": 0,
    }
    assert listed(crw) == [
        f"no runs under {crw.state / 'flow'}; start one with: crw flow start WORKFLOW"
    ]
