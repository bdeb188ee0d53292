"""The owner's orchestrator line as the commands leave it: the start binds it before
any process of the run exists, the process is the one party that writes it while
it holds the run, `next` only reads it, and a resume binds it after its own
started row."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from crw.binding.owner import bind_owner, orchestrator_line, owner_file, read_last_line
from crw.engine.config.roles import RoleTable, load_roles
from crw.engine.run.locks import hold_run, is_held
from crw.engine.run.rundir import RunDir
from crw.journal.log import read_journal
from tests.cli.conftest import Crw, start_in_process, wait_for_exit
from tests.cli.test_answer import _held_run
from tests.cli.test_next import RUN, WORKFLOW, _append_rows, new_run

OWNER = "owner-thread"  # the owner of `new_run`'s spec
Rows = list[dict[str, Any]]


def lines(state: Path) -> Rows:
    path = owner_file(state, OWNER)
    return [json.loads(raw) for raw in path.read_text().splitlines()] if path.exists() else []


def line_of(run_id: str, table: RoleTable) -> dict[str, Any]:
    return orchestrator_line(run_id, table.role_pairs(), table.policy_digest())


def started_rows(run: RunDir) -> Rows:
    return [row for row in read_journal(run.journal).rows if row["row"] == "started"]


def test_the_start_binds_the_owner_before_any_process_of_the_run_exists(
    crw: Crw, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: BIND-LINE-9, CMD-START-20: when the start launches the run's process,
    the owner's last line is already the run's, and no process holds the run (nor
    ever did: no process lock, no started row)."""
    (crw.state).mkdir()
    (crw.state / "roles.toml").write_text('[architect]\nmodel = "m-arch"\n')
    at_launch: list[tuple[dict[str, Any] | None, list[Path], bool, Rows]] = []

    def watched_launch(run: RunDir) -> None:
        last = read_last_line(owner_file(crw.state, OWNER)).line
        locks = list(run.root.glob("process.*.lock"))
        at_launch.append((last, locks, is_held(run.run_lock), read_journal(run.journal).rows))

    outcome = start_in_process(crw, monkeypatch, OWNER, watched_launch)
    table = load_roles(crw.state / "roles.toml")
    assert at_launch == [(line_of(outcome.spec.id, table), [], False, [])]
    assert outcome.warnings == []


def test_while_a_process_holds_the_run_no_command_writes_the_owners_line(crw: Crw) -> None:
    """spec: BIND-LINE-10, BIND-LINE-22, CMD-NEXT-17: while a process holds the run,
    next (the line missing, then the run's), status and a refused resume leave the
    owner's flow-bound file as it is, and a second start on the thread warns and
    binds nothing, nor does its process while the first run lives."""
    run = new_run(crw)
    state = ("--state", str(crw.state))
    path = owner_file(crw.state, OWNER)
    with hold_run(run) as process:
        assert process is not None
        _append_rows(
            run,
            {"row": "started", "backend": "session", "pid": os.getpid(), "process": process.token}
            | {"role_pairs": RoleTable.undecided().role_pairs()},
        )
        unbound = crw("flow", "next", RUN, *state, "--json")
        assert unbound.code == 0, unbound.stderr
        assert not path.exists()

        bound = line_of(RUN, RoleTable.undecided())
        assert bind_owner(crw.state, OWNER, bound, lambda _run: True).bound
        before = path.read_bytes()
        step = crw("flow", "next", RUN, *state, "--wait", "0.3", "--json")
        status = crw("flow", "status", RUN, *state, "--json")
        resume = crw("flow", "resume", RUN, *state)
        second = crw.start(str(WORKFLOW), "--owner", OWNER)
        assert second.code == 0, second.stderr
        second_run = RunDir(Path(second.json()["run_dir"]))
        wait_for_exit(second_run.root)  # its process ran its course
        assert path.read_bytes() == before
    process_log = second_run.log.read_text()
    assert f"owner thread {OWNER} is bound to live run {RUN}; run {second_run.id}" in process_log
    assert (step.code, status.code, resume.code) == (0, 0, 1)
    (warning,) = second.json()["warnings"]
    assert warning.startswith(f"owner thread {OWNER} is bound to live run {RUN}; ")
    assert lines(crw.state) == [bound]


def test_a_foreground_resume_binds_its_started_rows_pins_and_no_command_records_the_store(
    crw: Crw,
) -> None:
    """spec: BIND-LINE-12, ROWS-15: the role store changed after the start: next and
    status record nothing of it (no row, no line); the foreground resume records
    the new pairs in its started row alone and binds the owner with them right
    after it. No role_store_changed row is ever written."""
    out = crw.start(str(WORKFLOW), "--owner", OWNER).json()
    run = RunDir(Path(out["run_dir"]))
    wait_for_exit(run.root)  # its host is not there: it paused
    first = line_of(out["run"], RoleTable.undecided())
    assert lines(crw.state) == [first]

    store = crw.state / "roles.toml"
    store.write_text('[executor]\nmodel = "m-exec"\neffort = "high"\n')
    state = ("--state", str(crw.state))
    before = run.journal.read_bytes()
    assert crw("flow", "next", out["run"], *state, "--json").code == 0
    assert crw("flow", "status", out["run"], *state, "--json").code == 0
    assert run.journal.read_bytes() == before
    assert lines(crw.state) == [first]

    resumed = crw("flow", "resume", out["run"], *state, "--json")
    assert resumed.code == 0, resumed.stderr
    assert resumed.json()["state"] == "paused"
    table = load_roles(store)
    started = started_rows(run)
    assert len(started) == 2
    assert (started[1]["role_pairs"], started[1]["policy_digest"]) == (
        table.role_pairs(),
        table.policy_digest(),
    )
    assert lines(crw.state) == [first, line_of(out["run"], table)]
    kinds = [row["row"] for row in read_journal(run.journal).rows]
    assert "role_store_changed" not in kinds


def test_a_start_whose_binding_cannot_be_written_warns_and_starts(crw: Crw) -> None:
    """spec: BIND-LINE-24"""
    crw.state.mkdir()
    (crw.state / "flow-bound").write_text("")  # no directory can be made there
    result = crw.start(str(WORKFLOW), "--owner", OWNER)
    assert result.code == 0, result.stderr
    out = result.json()
    assert out["started"] is True
    (warning,) = out["warnings"]
    assert warning.startswith(f"cannot bind owner thread {OWNER} to run {out['run']}: ")
    wait_for_exit(Path(out["run_dir"]))
    assert started_rows(RunDir(Path(out["run_dir"])))


def test_a_cancel_that_ends_a_paused_run_itself_closes_the_owners_line(crw: Crw) -> None:
    """spec: BIND-LINE-13: a paused run no process holds is cancelled by the command
    itself, under the run lock (no process runs): the run ends, and so does its line."""
    out = crw.start(str(WORKFLOW), "--owner", OWNER).json()
    run = RunDir(Path(out["run_dir"]))
    wait_for_exit(run.root)  # its host is not there: it paused
    assert lines(crw.state) == [line_of(out["run"], RoleTable.undecided())]
    cancelled = crw("flow", "cancel", out["run"], "--state", str(crw.state), "--json")
    assert cancelled.code == 0, cancelled.stderr
    assert [row["row"] for row in read_journal(run.journal).rows][-2:] == ["cancelled", "ended"]
    assert lines(crw.state) == [
        line_of(out["run"], RoleTable.undecided()),
        {"kind": "closed", "run_id": out["run"]},
    ]


def test_an_abort_that_ends_the_run_closes_the_owners_line_as_a_cancel_does(crw: Crw) -> None:
    """spec: BIND-LINE-13, CMD-RESUME-8: a run waiting for a decision, no process
    holding it, is ended by `crw flow answer --abort` itself: its owner's line is
    closed with the line a cancel writes, once (the abort said again closes
    nothing more), and the line the owner then has is open to a new start."""
    run = _held_run(crw)
    bound = line_of(RUN, RoleTable.undecided())
    assert bind_owner(crw.state, OWNER, bound, lambda _: False).warning is None
    status = crw("flow", "status", RUN, "--state", str(crw.state), "--json").json()
    assert status["state"] == "waiting_decision"
    for _ in range(2):
        answered = crw("flow", "answer", RUN, "build.1", "--abort", "--state", str(crw.state))
        assert answered.code == 0, answered.stderr
    assert [row["row"] for row in read_journal(run.journal).rows][-1] == "decision"
    assert lines(crw.state) == [bound, {"kind": "closed", "run_id": RUN}]
    assert read_last_line(owner_file(crw.state, OWNER)).open_run is None
