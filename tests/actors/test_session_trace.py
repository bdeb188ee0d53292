"""SessionConfig.Trace end to end: a session run on the simulated host, a subagent
that writes while its turn is in flight, and the rows the run writes for it.

The owner's checkout is a real git repository (pygit2) the owner thread works in:
its subagents get its cwd (host_cwd). The run's state directory lies in it, as
`crw flow start` puts it, and so does each call's directory P.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pygit2
import pytest
import trio
from trio.testing import MockClock

from crw.engine.run.rundir import RunDir
from crw.engine.run.runspec import RunSpec, WorkflowRef, write_run_spec
from crw.host.client import open_client
from crw.host.sim.connection import connect_in_memory
from crw.host.sim.server import open_sim_host
from crw.journal.log import read_journal
from crw.settings import Settings
from tests.actors.test_session_resume import remembering, run_until_killed
from tests.actors.test_session_run import RUN_ID, Harness, Owner, kinds
from tests.workspace.gitrepo import make_repo

WORKFLOW = """
name = "traced"
pool = 1

[[node]]
id = "look"
role = "reviewer"
task = "Look at the code."
schema.type = "object"
schema.required = ["verdict"]
schema.properties.verdict = { enum = ["pass", "fail"] }

[[node]]
id = "build"
role = "executor"
needs = ["look"]
task = "Build it."
schema = { type = "object", required = ["summary"], properties = { summary = { type = "string" } } }
"""

Write = Callable[[Path], object]
"""What a subagent does while its turn is in flight, given its call's P."""


@asynccontextmanager
async def traced(tmp_path: Path, *, trace: bool = True) -> AsyncIterator[Harness]:
    owner = tmp_path / "owner"
    make_repo(owner, {"README.md": "hello\n"})
    run = RunDir(owner / ".crw" / "flow" / RUN_ID)
    run.create()
    (run.root.parent / "wf.toml").write_text(WORKFLOW)
    spec = RunSpec(
        id=RUN_ID,
        workflow=WorkflowRef(path=str(run.root.parent / "wf.toml"), digest="sha256:x"),
        backend="session",
        pool=1,
        repository=str(owner),
    )
    write_run_spec(run.run_json, spec)
    async with (
        open_sim_host(tmp_path / "home") as sim,
        open_client(await connect_in_memory(sim)) as client,
    ):
        owner_id = str((await client.request("sim/startOwner", {"cwd": str(owner)}))["threadId"])
        # Each subagent takes a minute: the test writes while its turn is in flight.
        for role in ("reviewer", "executor"):
            await client.request(
                "sim/script", {"match": {"role": role}, "behaviour": {"seconds": 60}}
            )
        settings = Settings(poll_interval=2.0, host_poll_interval=30.0, trace=trace)
        yield Harness(sim, client, run, Owner(client, run, owner_id), settings)


async def run_writing(h: Harness, writes: dict[str, Write]) -> list[dict[str, Any]]:
    """Run the workflow; once a call's turn is bound, do what `writes` says for it."""

    async def subagent(call: str, write: Write) -> None:
        while True:  # the journal is the one thing to watch: no event to wait on
            rows = read_journal(h.run.journal).rows
            if any(row["row"] == "turn_started" and row.get("call") == call for row in rows):
                break
            await trio.sleep(1)
        write(h.run.calls / call)

    async with trio.open_nursery() as nursery:
        for call, write in writes.items():
            nursery.start_soon(subagent, call, write)
        state, rows = await h.go()
    assert state == "ended" and rows[-1]["status"] == "completed"
    return rows


def warnings_of(rows: list[dict[str, Any]]) -> list[tuple[str, str]]:
    names = ("read_role_wrote", "executor_wrote_outside", "shared_state_changed")
    return [(row["row"], row["call"]) for row in rows if row["row"] in names]


def owner_repo(h: Harness) -> pygit2.Repository:
    return pygit2.Repository(str(h.run.root.parents[2]))


async def test_a_reviewer_that_writes_a_file_is_read_role_wrote(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: HARV-45, HARV-43, HARV-44, TRACE-1"""
    async with traced(tmp_path) as h:
        rows = await run_writing(h, {"look.1": lambda p: (p / "notes.md").write_text("mine\n")})
    assert warnings_of(rows) == [("read_role_wrote", "look.1")]
    # Recorded, never enforced: the call completes all the same, its warning before.
    assert kinds(rows, "look.1") == [
        "prepared",
        "step_published",
        "thread_started",
        "turn_started",
        "read_role_wrote",
        "completed",
    ]
    bound = next(r for r in rows if r["row"] == "turn_started" and r["call"] == "look.1")
    warning = next(r for r in rows if r["row"] == "read_role_wrote")
    assert warning["before"] == bound["trace"]["workspace"] != warning["after"]
    assert warning["where"] == str(h.run.calls / "look.1")
    assert bound["trace"]["checkout"] == str(h.run.root.parents[2].resolve())


async def test_an_executor_writing_in_p_is_no_warning(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: HARV-45 (an executor's role changes P)"""
    async with traced(tmp_path) as h:
        rows = await run_writing(h, {"build.1": lambda p: (p / "main.py").write_text("x = 1\n")})
    assert warnings_of(rows) == []
    assert kinds(rows, "build.1")[-1] == "completed"


async def test_an_executor_writing_outside_p_is_executor_wrote_outside(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: HARV-46, HARV-43, TRACE-2"""
    async with traced(tmp_path) as h:
        checkout = h.run.root.parents[2]
        rows = await run_writing(
            h, {"build.1": lambda p: (checkout / "README.md").write_text("changed\n")}
        )
    assert warnings_of(rows) == [("executor_wrote_outside", "build.1")]
    warning = next(r for r in rows if r["row"] == "executor_wrote_outside")
    assert warning["where"] == str(checkout.resolve())
    assert kinds(rows, "build.1")[-2:] == ["executor_wrote_outside", "completed"]


async def test_a_ref_under_refs_crw_changed_mid_call_is_shared_state_changed(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: HARV-47, TRACE-3"""
    async with traced(tmp_path) as h:
        repo = owner_repo(h)

        def other_run(p: Path) -> None:
            repo.references.create("refs/crw/flow/run-2/nodes/build", repo.head.target)

        def own_run(p: Path) -> None:
            repo.references.create(f"refs/crw/flow/{RUN_ID}/nodes/build", repo.head.target)

        rows = await run_writing(h, {"look.1": other_run, "build.1": own_run})
    assert warnings_of(rows) == [("shared_state_changed", "look.1")]


async def test_a_binding_file_changed_mid_call_is_shared_state_changed(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: HARV-47, TRACE-4, TRACE-5"""
    async with traced(tmp_path) as h:
        bound = h.run.root.parents[1] / "flow-bound"

        def another_owner(p: Path) -> None:
            bound.mkdir(exist_ok=True)
            (bound / "owner-2.jsonl").write_text('{"kind": "orchestrator", "run_id": "run-2"}\n')

        def the_hook(p: Path) -> None:
            (bound / "decisions").mkdir(parents=True, exist_ok=True)
            (bound / "decisions" / "owner-2.jsonl").write_text('{"role": "executor"}\n')

        rows = await run_writing(h, {"look.1": another_owner, "build.1": the_hook})
    assert warnings_of(rows) == [("shared_state_changed", "look.1")]


async def test_trace_off_takes_no_digests_and_writes_no_warning(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: HARV-44"""
    async with traced(tmp_path, trace=False) as h:
        checkout = h.run.root.parents[2]
        rows = await run_writing(
            h,
            {
                "look.1": lambda p: (p / "notes.md").write_text("mine\n"),
                "build.1": lambda p: (checkout / "README.md").write_text("changed\n"),
            },
        )
    assert warnings_of(rows) == []
    assert all("trace" not in row for row in rows)


async def test_the_bind_digests_survive_a_restart(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: HARV-44, HARV-46. The process that bound the turn dies before its
    harvest: the next one compares its harvest with the digests the bind recorded."""
    async with traced(tmp_path) as h:
        remembering(h)
        rows = await run_until_killed(h, monkeypatch, "turn_started")  # build.1's bind
        assert kinds(rows, "build.1")[-1] == "turn_started"
        checkout = h.run.root.parents[2]
        (checkout / "README.md").write_text("written while no process ran\n")
        state, rows = await h.go()
    assert state == "ended"
    assert warnings_of(rows) == [("executor_wrote_outside", "build.1")]
