"""The run process's side of the owner's orchestrator line: it binds the owner right
after its started row and closes the line when the run ends, in one Trio run."""

from __future__ import annotations

import json
import logging
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import trio
from trio.testing import MockClock

from crw.actors import owner_line
from crw.actors import run as run_module
from crw.actors.run import run_process
from crw.binding import owner as owner_module
from crw.binding.owner import BindResult, LastLine, bind_owner, orchestrator_line, owner_file
from crw.binding.owner import read_last_line as last_line_of
from crw.engine.config.roles import RoleTable
from crw.engine.run.locks import hold_run
from crw.engine.run.rundir import RunDir
from crw.host.connect import connect_host
from crw.journal.log import read_journal
from tests.actors.test_run import _run
from tests.actors.test_run_faults import Links
from tests.actors.test_wake import wake_run

OWNER = "owner-1"  # the owner of `_run`'s spec
Lines = list[dict[str, Any]]


def lines(state: Path, owner: str = OWNER) -> Lines:
    path = owner_file(state, owner)
    return [json.loads(raw) for raw in path.read_text().splitlines()] if path.exists() else []


def pinned_line(run_id: str, started: dict[str, Any]) -> dict[str, Any]:
    """The line of a started row's pins."""
    return orchestrator_line(run_id, started["role_pairs"], started["policy_digest"])


def undecided_line(run_id: str) -> dict[str, Any]:
    table = RoleTable.undecided()
    return orchestrator_line(run_id, table.role_pairs(), table.policy_digest())


def started_rows(run: RunDir) -> Lines:
    return [row for row in read_journal(run.journal).rows if row["row"] == "started"]


async def test_the_process_binds_the_pins_of_its_started_row_right_after_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: BIND-LINE-10, BIND-LINE-11: the start bound the store as it read then;
    the process binds again with the table its started row pins, once the row is in
    the journal. A second process on the same pins finds its line the last one and
    writes nothing. A run that pauses keeps its line open."""
    run, spec = _run(tmp_path)
    state = run.root.parents[1]
    assert bind_owner(state, OWNER, undecided_line("r1"), lambda _run: False).bound
    (state / "roles.toml").write_text('[explorer]\nmodel = "m1"\neffort = "low"\n')
    journal_at_bind: list[list[str]] = []

    def spying_bind(*args: Any) -> BindResult:
        journal_at_bind.append([row["row"] for row in read_journal(run.journal).rows])
        return bind_owner(*args)

    monkeypatch.setattr(owner_line, "bind_owner", spying_bind)
    assert await run_process(run, spec, state) == "paused"  # its host is not there
    (started,) = started_rows(run)
    assert journal_at_bind == [["started"]]
    assert lines(state) == [undecided_line("r1"), pinned_line("r1", started)]
    assert lines(state)[-1]["helperPairs"]["explorer"] == {"model": "m1", "effort": "low"}

    assert await run_process(run, spec, state) == "paused"
    assert len(started_rows(run)) == 2 and journal_at_bind[1] == ["started", "paused", "started"]
    assert lines(state) == [undecided_line("r1"), pinned_line("r1", started)]


async def test_a_missing_line_stays_missing_until_a_resume_binds_it_then_closes_it_at_the_end(
    tmp_path: Path,
    autojump_clock: MockClock,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """spec: BIND-LINE-12, BIND-LINE-13, BIND-LINE-14, BIND-LINE-21, BIND-LINE-22,
    CMD-RESUME-7, CMD-RESUME-8: the first process finds the owner bound to another
    live run: it warns, binds nothing and runs (its host is gone: it pauses). The
    resume (the run's next process) binds the owner after its own started row,
    closing the line of the other run, which is no longer live; the owner is bound
    to the run while it runs, and the line is closed once the run ended."""
    async with wake_run(tmp_path, monkeypatch, plays_now=True) as run:
        owner = run.owner.thread_id
        assert bind_owner(run.state, owner, undecided_line("other"), lambda _run: False).bound
        monkeypatch.setattr(run_module, "connect_host", connect_host)  # no host at spec.host
        other = RunDir.of(run.state, "other")
        other.create()
        with caplog.at_level(logging.WARNING), hold_run(other):
            assert await run.process() == "paused"
        assert lines(run.state, owner) == [undecided_line("other")]
        assert f"owner thread {owner} is bound to live run other" in caplog.text

        monkeypatch.setattr(run_module, "connect_host", Links(run.sim).connect)
        bound_at_take: Lines = []
        take = run.owner._take

        async def watched_take(step: Any) -> str:
            bound_at_take.append(last_line_of(owner_file(run.state, owner)).line or {})
            return await take(step)

        monkeypatch.setattr(run.owner, "_take", watched_take)
        assert await run.process() == "ended"
    started = started_rows(run.dir)[-1]
    bound = pinned_line(run.spec.id, started)
    assert bound_at_take == [bound]
    assert lines(run.state, owner) == [
        undecided_line("other"),
        {"kind": "closed", "run_id": "other"},
        bound,
        {"kind": "closed", "run_id": run.spec.id},
    ]


async def test_a_binding_that_cannot_be_written_is_warned_and_the_run_starts(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """spec: BIND-LINE-24"""
    run, spec = _run(tmp_path)
    state = run.root.parents[1]
    (state / "flow-bound").write_text("")  # no directory can be made there
    with caplog.at_level(logging.WARNING):
        assert await run_process(run, spec, state) == "paused"
    assert [row["row"] for row in read_journal(run.journal).rows] == ["started", "paused"]
    warnings = [r.getMessage() for r in caplog.records if r.name == "crw.owner_line"]
    assert len(warnings) == 1
    assert warnings[0].startswith(f"cannot bind owner thread {OWNER} to run r1: ")
    assert "the run starts unbound" in warnings[0]


async def test_two_run_processes_binding_one_owner_at_once_bind_one_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: BIND-LINE-22, BIND-LINE-23: two runs of one owner thread, both live,
    their processes binding at the same moment: the read of the last line and the
    append are one step under the flow-bound lock, so exactly one binds and the
    other, finding the thread bound to a live run, is warned and binds nothing."""
    run1, spec1 = _run(tmp_path)
    state = run1.root.parents[1]
    run2, spec2 = RunDir.of(state, "r2"), spec1.model_copy(update={"id": "r2"})
    run2.create()
    together, done = threading.Barrier(2, timeout=10), threading.Barrier(2, timeout=10)
    results: list[BindResult] = []

    def racing_bind(*args: Any) -> BindResult:
        together.wait()  # both processes hold their runs and bind now
        results.append(bind_owner(*args))
        done.wait()  # neither goes on (and ends) before both have bound
        return results[-1]

    def slow_read(path: Path) -> LastLine:
        last = last_line_of(path)
        time.sleep(0.1)  # a read that takes its time: the other bind comes meanwhile
        return last

    monkeypatch.setattr(owner_line, "bind_owner", racing_bind)
    monkeypatch.setattr(owner_module, "read_last_line", slow_read)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(run_process, run1, spec1, state)
        nursery.start_soon(run_process, run2, spec2, state)
    assert sorted(result.bound for result in results) == [False, True]
    (line,) = lines(state)
    loser = "r2" if line["run_id"] == "r1" else "r1"
    warning = next(result.warning for result in results if not result.bound)
    assert warning is not None
    assert warning.startswith(f"owner thread {OWNER} is bound to live run {line['run_id']}; ")
    assert f"run {loser} starts unbound" in warning
