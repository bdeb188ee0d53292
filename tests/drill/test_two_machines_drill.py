"""The two-machine drill: real processes, one PostgreSQL database, a run taken over
by a second machine once the first one's writer stopped renewing its lease.

Two machines are two sets of processes with their own state directories and
machine ids ($CRW_MACHINE a and b) on one database ($CRW_DB), with a short lease
($CRW_LEASE_SECONDS). A `crw host sim serve` process is the host both reach. An
App Server run starts on a; a's run process group is killed (SIGKILL) or stopped
(SIGSTOP) while build.1's turn runs; b's `crw flow resume RUN` (no directory of
the run on b: it is made from the database) is refused while a's lease is live,
then takes the run once it lapsed and completes it. No row a committed is lost,
the seqs are contiguous, no turn is run twice on the host; a stopped writer that
is let go on (SIGCONT) after b took the run finds itself fenced: its commits
change nothing and it exits.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from crw.engine.run.rundir import RunDir
from crw.journal.pg_lease import Lease, run_lease
from crw.journal.postgres import PostgresJournal
from tests.cli.conftest import Crw
from tests.deadlines import LOADED
from tests.drill.test_app_server_crash_drill import CALL, REPAIRED, AppDrill, outcome
from tests.drill.test_crash_drill import alive, drill_at, wait_until
from tests.processes import reap_naming

pytestmark = pytest.mark.xdist_group("test_two_machines_drill")

LEASE = 8.0
"""Seconds of the writers' lease: long enough that b's first resume meets a's lease
live on a loaded machine, short enough for the drill. a's last commit (build.1's
turn_started, which the drill waits for before it stops a) renews the lease, so b's
refused resume, a command forked from the worker's server, has nearly all of it;
each drill then waits for the rest, the most of its wall."""


@dataclass
class Machines:
    a: AppDrill
    b: Crw
    url: str

    def journal(self) -> PostgresJournal:
        assert self.a.run is not None
        return PostgresJournal(self.url, self.a.run.id, self.a.run.journal)

    def rows(self) -> list[dict[str, Any]]:
        """The run's rows in the database, over a's drill's one kept connection
        (`JournalTail`): the drill's waits poll them."""
        return self.a.rows()

    def lease(self) -> Lease:
        assert self.a.run is not None
        lease = run_lease(self.url, self.a.run.id)
        assert lease is not None
        return lease

    def resume_on_b(self) -> Any:
        assert self.a.run is not None
        return self.b("flow", "resume", self.a.run.id, "--detach", "--state", str(self.b.state),
                      "--json")  # fmt: skip

    def a_mid_build(self) -> int:
        """Start the run on a and wait until build.1's turn runs; a's run process."""
        self.a.start(crash_after=None)

        def building() -> bool:
            return any(r["row"] == "turn_started" and r.get("call") == CALL for r in self.rows())

        wait_until("build.1's turn runs on a", building)
        pid = int(next(r["pid"] for r in self.rows() if r["row"] == "started"))
        assert os.getpgid(pid) == pid != os.getpgrp()  # its own group: the machine's
        return pid

    def ended(self) -> list[dict[str, Any]]:
        def done() -> bool:
            rows = self.rows()
            return bool(rows) and rows[-1]["row"] == "ended"

        wait_until("the run ends", done, LOADED)
        return self.rows()


def machine_env(crw: Crw, name: str, url: str) -> None:
    crw.env |= {"CRW_DB": url, "CRW_MACHINE": name, "CRW_LEASE_SECONDS": str(LEASE)}


@pytest.fixture
def machines(tmp_path: Path, postgres_url: str) -> Iterator[Machines]:
    a = drill_at(AppDrill, tmp_path / "a")
    (tmp_path / "b" / "tmp").mkdir(parents=True)
    b = Crw(tmp_path / "b" / "state", tmp_path / "b" / "tmp")
    machine_env(a.crw, "a", postgres_url)
    machine_env(b, "b", postgres_url)
    try:
        a.serve()
        yield Machines(a, b, postgres_url)
    finally:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            for pid in [r["pid"] for r in Machines(a, b, postgres_url).rows() if "pid" in r]:
                os.kill(pid, signal.SIGKILL)
        a.reap()
        b.reap()
        reap_naming(tmp_path)


def _refused_while_live(machines: Machines) -> None:
    """b's resume while a's lease is live: refused in one line naming a and the end
    of its lease, and nothing made on b."""
    assert machines.a.run is not None
    refused = machines.resume_on_b()
    assert refused.code == 1, refused.stdout + refused.stderr
    said = refused.error()
    lease = machines.lease()
    assert f"run {machines.a.run.id} is held by machine a until {lease.until}" in said
    assert "once that lease has lapsed" in said and said.count("\n") == 1
    assert not RunDir.of(machines.b.state, machines.a.run.id).root.exists()


def _lease_lapsed(machines: Machines) -> None:
    """Wait until a's lease lapsed: each look sleeps until the end the lease names
    (a second at most: a live writer renews it), not a poll every few ms (each
    look is a connection to the database)."""
    deadline = time.monotonic() + LOADED
    while (lease := machines.lease()).live:
        assert time.monotonic() < deadline, "timed out waiting until a's lease lapses"
        time.sleep(min(max(lease.left, 0.02), 1.0))


def _taken_by_b(machines: Machines) -> int:
    """Wait until a's lease lapsed (a renews it no more), resume on b: b's run process."""
    _lease_lapsed(machines)
    resumed = machines.resume_on_b()
    assert resumed.code == 0, resumed.stderr
    pid = resumed.json()["pid"]
    assert isinstance(pid, int)
    return pid


def _whole(rows: list[dict[str, Any]], acknowledged: bytes, data: bytes) -> None:
    """No row lost nor run twice: a's rows all there, seqs contiguous, the run
    completed, build.1's rows those of an undisturbed call, one turn a marker."""
    assert data.startswith(acknowledged)
    assert [r["seq"] for r in rows] == list(range(1, len(rows) + 1))
    assert rows[-1]["status"] == "completed"
    assert set(outcome(rows)) == {"explore.1", "build.1", "review.1"}
    assert [r["row"] for r in rows if r.get("call") == CALL] == REPAIRED
    assert "held" not in {r["row"] for r in rows}
    for call in outcome(rows):
        turns = [r["k"] for r in rows if r["row"] == "turn_started" and r.get("call") == call]
        assert len(turns) == len(set(turns)), f"{call}'s turn rows twice: {turns}"


def test_a_run_whose_machine_died_is_taken_by_another_after_its_lease(
    machines: Machines,
) -> None:
    """spec: STEP-59 (the run resumed on another machine follows the turn its killed
    machine's process started, on the call's resumed thread; no turn sent twice)"""
    a_pid = machines.a_mid_build()
    os.killpg(a_pid, signal.SIGKILL)
    wait_until("a's run process is gone", lambda: not alive(a_pid))
    acknowledged = machines.journal().read_from(0)
    assert machines.rows()[-1]["row"] != "ended"
    _refused_while_live(machines)
    b_pid = _taken_by_b(machines)
    rows = machines.ended()
    _whole(rows, acknowledged, machines.journal().read_from(0))
    assert [r["pid"] for r in rows if r["row"] == "started"] == [a_pid, b_pid]
    turns = machines.a.turns_by_marker()
    assert set(turns.values()) == {1}, f"turns sent twice for one marker: {turns}"
    lease = machines.lease()
    assert lease.machine == "b"
    assert machines.a.run is not None
    assert RunDir.of(machines.b.state, machines.a.run.id).run_json.is_file()


def test_a_stopped_writer_let_go_on_after_another_took_its_run_is_fenced(
    machines: Machines,
) -> None:
    """spec: STEP-59. The fenced writer's late commit is refused (it changes nothing),
    and a's own resume while b holds the run is refused naming b."""
    a_pid = machines.a_mid_build()
    os.killpg(a_pid, signal.SIGSTOP)
    try:
        acknowledged = machines.journal().read_from(0)
        _refused_while_live(machines)
        b_pid = _taken_by_b(machines)
        wait_until(
            "b records its started row",
            lambda: [r["pid"] for r in machines.rows() if r["row"] == "started"] == [a_pid, b_pid],
        )
        assert machines.a.run is not None
        on_a = machines.a.crw("flow", "resume", machines.a.run.id, "--detach",
                              "--state", str(machines.a.crw.state))  # fmt: skip
        assert on_a.code == 1
        assert f"run {machines.a.run.id} is held by machine b until " in on_a.stderr
    finally:
        os.killpg(a_pid, signal.SIGCONT)
    wait_until("a, fenced, exits", lambda: not alive(a_pid), LOADED)
    rows = machines.ended()
    _whole(rows, acknowledged, machines.journal().read_from(0))
    assert [r["pid"] for r in rows if r["row"] == "started"] == [a_pid, b_pid]
    assert machines.a.run is not None
    log = machines.a.run.log.read_text()
    assert "was taken by another writer (this one's epoch 1 is fenced)" in log, log
    turns = machines.a.turns_by_marker()
    assert set(turns.values()) == {1}, f"turns sent twice for one marker: {turns}"
