"""What `status` and `next` say of a run a fault stopped, and that `next` starts
nothing for it: the rows are the run process's own (written by its journal writer)."""

from __future__ import annotations

from typing import Any

import trio

from crw.actors.journal_writer import open_journal_writer
from crw.engine.run.rundir import RunDir
from crw.journal.rows import Paused, Prepared, RowModel, Started
from tests.cli.conftest import Crw
from tests.cli.test_next import RUN, new_run

REPLY = "/s/flow/r/replies/.0123abcd.tmp"


def commit(run: RunDir, *rows: RowModel) -> None:
    async def write() -> None:
        async with open_journal_writer(run.journal) as journal:
            await journal.commit(list(rows))

    trio.run(write)


def paused_run(crw: Crw, paused: Paused) -> RunDir:
    run = new_run(crw)
    commit(
        run,
        Started(backend="session", pid=1),
        Prepared(call="build.1", node="build", role="executor"),
        paused,
    )
    return run


def flow(crw: Crw, *args: str) -> Any:
    result = crw("flow", *args, RUN, "--state", str(crw.state), "--json")
    assert result.code == 0, result.stderr
    return result.json()


def test_run_paused_for_a_write_fault_shows_the_reason_error_and_file(crw: Crw) -> None:
    """spec: CMD-NEXT-2, CMD-NEXT-20"""
    error = "No space left on device (ENOSPC)"
    run = paused_run(crw, Paused(reason="write_failed", error=error, file=REPLY))
    before = run.journal.read_bytes()
    status = flow(crw, "status")
    assert status["state"] == "paused" and status["holder_pid"] is None
    assert status["paused"] == {"reason": "write_failed", "error": error, "file": REPLY}
    human = crw("flow", "status", RUN, "--state", str(crw.state)).stdout.splitlines()
    assert human[1] == f"  paused: write_failed: {REPLY}: {error}"
    answer = flow(crw, "next")
    assert answer["state"] == "paused" and "resumed_pid" not in answer
    assert f"paused (write_failed: {REPLY}: {error})" in answer["hint"]
    assert f"crw flow resume {RUN}" in answer["hint"]
    assert run.journal.read_bytes() == before  # next started nothing


def test_run_paused_for_its_host_says_so_in_status(crw: Crw) -> None:
    """spec: CMD-NEXT-2"""
    error = "the connection to the host is closed"
    paused_run(crw, Paused(reason="host_unavailable", error=error))
    status = flow(crw, "status")
    assert status["paused"] == {"reason": "host_unavailable", "error": error, "file": None}
    assert f"paused (host_unavailable: {error})" in flow(crw, "next")["hint"]


def test_run_paused_by_crw_flow_pause_says_so_plainly(crw: Crw) -> None:
    """spec: CMD-NEXT-2: the reason `paused` is not repeated after the state."""
    paused_run(crw, Paused(reason="paused", request="q-1"))
    assert flow(crw, "status")["paused"]["reason"] == "paused"
    human = crw("flow", "status", RUN, "--state", str(crw.state)).stdout.splitlines()
    assert human[1] == "  paused by crw flow pause"
    assert "The run is paused by crw flow pause;" in flow(crw, "next")["hint"]


def test_resumed_run_is_no_longer_shown_paused(crw: Crw) -> None:
    run = paused_run(crw, Paused(reason="host_unavailable", error="gone"))
    commit(run, Started(backend="session", pid=2))
    assert flow(crw, "status")["paused"] is None
