"""The run process: locks, then its started row, in one Trio run."""

from __future__ import annotations

import gc
import logging
import os
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager, nullcontext
from pathlib import Path
from typing import Any

import pytest
import trio

from crw.actors import run as run_module
from crw.actors.journal_writer import AfterCommit, JournalWriter, open_journal_writer
from crw.actors.run import run_process
from crw.bus import steps as bus
from crw.clock import WallClock, fixed_clock, system_clock
from crw.engine.answers.answer import digest
from crw.engine.config.roles import load_roles
from crw.engine.config.workflow import load_workflow
from crw.engine.run.locks import is_held, run_lock
from crw.engine.run.rundir import RunDir
from crw.engine.run.runspec import RunEnv, RunSpec, WorkflowRef, recorded_settings
from crw.journal.log import JournalRead, read_journal
from crw.journal.rows import Allocation, Prepared, StepPublished
from crw.settings import Settings
from tests.cli.conftest import EXAMPLES


def _run(tmp_path: Path, backend: str = "session") -> tuple[RunDir, RunSpec]:
    state = tmp_path / "state"
    run = RunDir(state / "flow" / "r1")
    run.create()
    workflow = load_workflow(EXAMPLES / "fix-issue.toml")
    spec = RunSpec(
        id="r1",
        workflow=WorkflowRef(path=str(workflow.path), digest=workflow.digest),
        backend=backend,
        pool=2,
        host=f"unix:{tmp_path / 'nobody.sock'}",
        owner="owner-1",
        env=RunEnv(TMPDIR=str(tmp_path)),
    )
    return run, spec


async def test_started_row_names_backend_process_pid_and_pinned_pairs(tmp_path: Path) -> None:
    """spec: GEN-8"""
    run, spec = _run(tmp_path)
    state = run.root.parents[1]
    (state / "roles.toml").write_text('[explorer]\nmodel = "m1"\neffort = "low"\n')
    await run_process(run, spec, state, clock=fixed_clock("2026-11-29T00:00:00.000000Z"))
    rows = read_journal(run.journal).rows
    assert [row["row"] for row in rows] == ["started", "paused"]  # its host is not there
    started = rows[0]
    assert started["row"] == "started" and started["seq"] == 1
    assert started["at"] == "2026-11-29T00:00:00.000000Z"
    assert started["backend"] == "session" and started["pid"] == os.getpid()
    assert isinstance(started["process"], str) and len(started["process"]) >= 8
    assert started["role_pairs"]["explorer"] == {
        "agent_type": "explorer",
        "model": "m1",
        "effort": "low",
    }
    assert started["policy_digest"].startswith("sha256:")


async def test_process_lock_is_held_while_the_started_row_is_committed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: BIND-LINE-15, BIND-LINE-17"""
    run, spec = _run(tmp_path)
    seen: list[tuple[bool, bool]] = []

    def spying_writer(
        path: Path,
        *,
        clock: WallClock = system_clock,
        after_commit: AfterCommit | None = None,
        known: JournalRead | None = None,
        sync_in_thread: bool = False,
    ) -> AbstractAsyncContextManager[JournalWriter]:
        locks = list(run.root.glob("process.*.lock"))
        seen.append((len(locks) == 1 and is_held(locks[0]), is_held(run.run_lock)))
        return open_journal_writer(
            path,
            clock=clock,
            after_commit=after_commit,
            known=known,
            sync_in_thread=sync_in_thread,
        )

    monkeypatch.setattr(run_module, "open_journal_writer", spying_writer)
    await run_process(run, spec, run.root.parents[1])
    assert seen == [(True, True)]
    assert list(run.root.glob("process.*.lock")) == []
    assert not is_held(run.run_lock)


@pytest.mark.parametrize("backend", ["session", "app-server"])
def test_a_runs_process_syncs_its_journal_in_a_worker_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, backend: str
) -> None:
    """`crw flow _run` syncs its journal in a worker thread, on either
    backend, so its loop goes on meanwhile and the commits made then share the
    next fsync."""
    run, spec = _run(tmp_path, backend)
    ran: list[Any] = []
    monkeypatch.setattr(run_module, "find_run", lambda state, name: run)
    monkeypatch.setattr(run_module, "read_run_spec", lambda path: spec)
    # os.environ is left alone: the recorded env is not put in place
    monkeypatch.setattr(run_module, "recorded_env", lambda spec, environ: nullcontext())
    monkeypatch.setattr(trio, "run", lambda entry, *args: ran.append(entry))
    assert run_module.run_command("r1", state=str(tmp_path / "state")) == 0
    assert [entry.keywords["sync_in_thread"] for entry in ran] == [True]


def test_the_process_starts_up_with_the_collector_off_and_freezes_what_it_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`crw flow _run` runs its start-up with the cyclic collector off, and hands the
    run the step that freezes what the start-up made and turns the collector on."""
    run, spec = _run(tmp_path)
    seen: list[tuple[bool, Any]] = []
    monkeypatch.setattr(run_module, "find_run", lambda state, name: run)
    monkeypatch.setattr(run_module, "read_run_spec", lambda path: spec)
    monkeypatch.setattr(run_module, "recorded_env", lambda spec, environ: nullcontext())
    monkeypatch.setattr(
        trio, "run", lambda entry, *args: seen.append((gc.isenabled(), entry.keywords))
    )
    monkeypatch.setattr(gc, "freeze", lambda: seen.append((gc.isenabled(), "freeze")))
    assert run_module.run_command("r1", state=str(tmp_path / "state")) == 0
    assert gc.isenabled()  # a start-up that stopped short lets it run again
    ((collecting, keywords),) = seen
    assert not collecting
    gc.disable()
    threshold = gc.get_threshold()
    try:
        keywords["started_up"]()
        assert gc.isenabled() and seen[-1] == (False, "freeze")
    finally:
        gc.enable()
        gc.set_threshold(*threshold)


def test_the_calls_run_with_the_youngest_generation_collected_less_often(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once started up, the run collects its youngest generation every
    YOUNG_COLLECTION objects, not Python's 700 (whose collections, and the full
    ones they lead to, walked the run's rows some 1,500 times in 10,000 calls); a
    foreground resume's process gets its own threshold back when the run is done."""
    run, spec = _run(tmp_path)
    monkeypatch.setattr(run_module, "find_run", lambda state, name: run)
    monkeypatch.setattr(run_module, "read_run_spec", lambda path: spec)
    monkeypatch.setattr(run_module, "recorded_env", lambda spec, environ: nullcontext())
    monkeypatch.setattr(gc, "freeze", lambda: None)
    during: list[tuple[int, ...]] = []

    def run_calls(entry: Any, *args: Any) -> None:
        entry.keywords["started_up"]()
        during.append(gc.get_threshold())

    monkeypatch.setattr(trio, "run", run_calls)
    before = gc.get_threshold()
    assert run_module.run_command("r1", state=str(tmp_path / "state")) == 0
    assert during == [(run_module.YOUNG_COLLECTION, *before[1:])]
    assert before[0] < run_module.YOUNG_COLLECTION
    assert gc.get_threshold() == before and gc.isenabled()


@pytest.mark.parametrize("backend", ["session", "app-server"])
async def test_the_start_up_is_done_before_the_backend_runs_its_first_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, backend: str
) -> None:
    """Each backend calls `started_up` once it is connected, just before it runs
    the calls."""
    import crw.actors.app_server_run
    import crw.actors.host_reader
    import crw.actors.session_run

    run, spec = _run(tmp_path, backend)
    spec = spec.model_copy(update={"owner": None})
    events: list[str] = []

    @asynccontextmanager
    async def connected(*args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        yield object()

    async def calls(*args: Any) -> str:
        events.append("calls")
        return "paused"

    monkeypatch.setattr(run_module, "connect_host", connected)
    monkeypatch.setattr(crw.actors.host_reader, "open_host_reader", connected)
    monkeypatch.setattr(crw.actors.session_run, "run_session_calls", calls)
    monkeypatch.setattr(crw.actors.app_server_run, "run_app_server_calls", calls)
    started_up = lambda: events.append("started up")  # noqa: E731
    await run_process(run, spec, run.root.parents[1], started_up=started_up)
    assert events == ["started up", "calls"]


@pytest.mark.parametrize("backend", ["session", "app-server"])
async def test_the_run_asks_its_host_for_only_the_notifications_its_reader_follows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, backend: str
) -> None:
    """The run's connection opts out of every other notification (`follows`): the
    host neither encodes nor sends it the items' texts and every thread's start
    (a turn brings ten or more notifications). A session run's reader follows five
    kinds; an app-server run's three, none of the status changes its calls do not
    wait on."""
    import crw.actors.app_server_run
    import crw.actors.host_reader
    import crw.actors.session_run

    run, spec = _run(tmp_path, backend)
    spec = spec.model_copy(update={"owner": None})
    asked: list[Any] = []

    @asynccontextmanager
    async def connected(*args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        asked.append(kwargs.get("follows"))
        yield object()

    async def calls(*args: Any) -> str:
        return "paused"

    monkeypatch.setattr(run_module, "connect_host", connected)
    monkeypatch.setattr(crw.actors.host_reader, "open_host_reader", connected)
    monkeypatch.setattr(crw.actors.session_run, "run_session_calls", calls)
    monkeypatch.setattr(crw.actors.app_server_run, "run_app_server_calls", calls)
    await run_process(run, spec, run.root.parents[1])
    follows = {
        "session": {
            "thread/tokenUsage/updated",
            "turn/completed",
            "error",
            "turn/started",
            "thread/status/changed",
        },
        "app-server": {"thread/tokenUsage/updated", "turn/completed", "error"},
    }[backend]
    assert asked == [follows, follows]  # the host, then the reader


async def test_started_row_names_the_token_of_the_process_lock_it_holds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: BIND-LINE-16, CMD-NEXT-21: the started row records the pairs the process
    runs on (role_pairs, policy_digest) and names as `process` the token of the
    lock file `process.<token>.lock` it holds while it commits the row."""
    run, spec = _run(tmp_path)
    held: list[str] = []

    def spying_writer(
        path: Path,
        *,
        clock: WallClock = system_clock,
        after_commit: AfterCommit | None = None,
        known: JournalRead | None = None,
        sync_in_thread: bool = False,
    ) -> AbstractAsyncContextManager[JournalWriter]:
        held.extend(lock.name for lock in run.root.glob("process.*.lock") if is_held(lock))
        return open_journal_writer(
            path,
            clock=clock,
            after_commit=after_commit,
            known=known,
            sync_in_thread=sync_in_thread,
        )

    monkeypatch.setattr(run_module, "open_journal_writer", spying_writer)
    state = run.root.parents[1]
    (state / "roles.toml").write_text('[executor]\nmodel = "m2"\n')
    await run_process(run, spec, state)
    started = read_journal(run.journal).rows[0]
    table = load_roles(state / "roles.toml")
    assert started["role_pairs"] == table.role_pairs()  # the pairs it runs on
    assert started["policy_digest"] == table.policy_digest()
    (lock_name,) = held
    assert started["row"] == "started"
    assert lock_name == run.process_lock(started["process"]).name
    assert lock_name == f"process.{started['process']}.lock"


async def test_process_lock_that_cannot_be_taken_gives_a_started_row_naming_no_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """spec: BIND-LINE-18"""
    run, spec = _run(tmp_path)
    # A directory where the process lock file would go: even root cannot lock it.
    monkeypatch.setattr("crw.engine.run.locks._new_token", lambda: "blocked")
    run.process_lock("blocked").mkdir()
    with caplog.at_level(logging.WARNING):
        await run_process(run, spec, run.root.parents[1])
    started = read_journal(run.journal).rows[0]
    assert started["row"] == "started" and "process" not in started
    assert any("process lock" in record.getMessage() for record in caplog.records)


async def test_a_resume_under_a_changed_role_store_repins_and_records_the_change(
    tmp_path: Path,
) -> None:
    """spec: CMD-NEXT-38: a resume takes the store's new pairs, records them in its
    started row and the change in a policy_repinned row right after it; a resume
    under an unchanged store records no change."""
    run, spec = _run(tmp_path)
    state = run.root.parents[1]
    store = state / "roles.toml"
    store.write_text('[executor]\nmodel = "m1"\n')
    await run_process(run, spec, state)
    first = load_roles(store)
    store.write_text('[executor]\nmodel = "m2"\neffort = "high"\n')
    await run_process(run, spec, state)
    await run_process(run, spec, state)
    now = load_roles(store)
    rows = read_journal(run.journal).rows
    kinds = [row["row"] for row in rows]
    repin = ["started", "policy_repinned", "paused"]
    assert kinds == ["started", "paused", *repin, "started", "paused"]
    started, repinned = rows[2], rows[3]
    assert started["role_pairs"] == now.role_pairs()
    assert started["policy_digest"] == now.policy_digest()
    assert repinned["pinned_digest"] == first.policy_digest()
    assert repinned["store_digest"] == now.policy_digest()
    assert repinned["role_pairs"]["executor"] == {
        "agent_type": "executor",
        "model": "m2",
        "effort": "high",
    }


async def test_run_held_by_another_process_is_refused_before_any_row(tmp_path: Path) -> None:
    from crw.engine.run.locks import RunHeldError

    run, spec = _run(tmp_path)
    with run_lock(run), pytest.raises(RunHeldError):
        await run_process(run, spec, run.root.parents[1])
    assert read_journal(run.journal).rows == []
    assert list(run.root.glob("process.*.lock")) == []


async def test_app_server_run_whose_host_cannot_be_reached_pauses(tmp_path: Path) -> None:
    """spec: GEN-9"""
    run, spec = _run(tmp_path, backend="app-server")
    assert await run_process(run, spec, run.root.parents[1]) == "paused"
    rows = read_journal(run.journal).rows
    assert [row["row"] for row in rows] == ["started", "paused"]
    assert rows[0]["backend"] == "app-server"
    assert rows[1]["reason"] == "host_unavailable" and "nobody.sock" in rows[1]["error"]


async def test_a_paused_process_warns_of_its_host_before_it_lets_its_process_lock_go(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The host_unavailable warning is the process's last word on run.log: it is
    logged before the process lock file is removed, which is what a waiter for the
    process's end looks at."""
    from crw.engine.run.locks import ProcessLock

    run, spec = _run(tmp_path, backend="app-server")
    warned_at_release: list[bool] = []
    release = ProcessLock.release

    def releasing(self: ProcessLock) -> None:
        warned_at_release.append(any("nobody.sock" in r.getMessage() for r in caplog.records))
        release(self)

    monkeypatch.setattr(ProcessLock, "release", releasing)
    with caplog.at_level(logging.WARNING):
        assert await run_process(run, spec, run.root.parents[1]) == "paused"
    assert warned_at_release == [True]
    assert sum("nobody.sock" in r.getMessage() for r in caplog.records) == 1


async def test_app_server_run_refuses_a_workflow_changed_since_the_start(tmp_path: Path) -> None:
    from crw.errors import InputError

    run, spec = _run(tmp_path, backend="app-server")
    spec = spec.model_copy(
        update={"workflow": WorkflowRef(path=str(EXAMPLES / "fix-issue.toml"), digest="sha256:0")}
    )
    with pytest.raises(InputError, match="changed since the run started"):
        await run_process(run, spec, run.root.parents[1])
    assert read_journal(run.journal).rows == []


async def test_the_process_runs_on_the_settings_its_spec_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A resumed process uses the timers and limits the start recorded in run.json."""
    run, spec = _run(tmp_path)
    recorded = Settings(lost_after=30.0, max_attempts=5)
    spec = spec.model_copy(update={"settings": recorded_settings(recorded)})
    used: list[Settings] = []
    journaled = run_module._journaled

    async def spying(*args: Any) -> Any:
        used.append(args[4])
        return await journaled(*args)

    monkeypatch.setattr(run_module, "_journaled", spying)
    await run_process(run, spec, run.root.parents[1])
    old = spec.model_copy(update={"settings": None})
    await run_process(run, old, run.root.parents[1])
    assert used == [recorded, Settings()]


async def test_a_resumed_process_decodes_the_journal_it_finds_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: GEN-8: a process that resumes a run reads every row an earlier process
    wrote once (the ended check, the writer's open and the backend's replay share
    one read) and then only its own started row: a resume grows with the journal
    once, not three times."""
    from tests.journal.decoding import count_decoded_lines

    run, spec = _run(tmp_path, backend="app-server")
    for _ in range(3):
        await run_process(run, spec, run.root.parents[1])
    keep = run_module._keep_snapshot

    def stop_counting(run_dir: RunDir) -> None:
        resumed.extend(decoded)  # the snapshot a leaving process keeps is not the resume's
        keep(run_dir)

    decoded = count_decoded_lines(monkeypatch)
    resumed: list[int] = []
    monkeypatch.setattr(run_module, "_keep_snapshot", stop_counting)
    assert await run_process(run, spec, run.root.parents[1]) == "paused"
    rows = read_journal(run.journal).rows
    assert [row["row"] for row in rows] == ["started", "paused"] * 4
    assert len(resumed) == 6 + 1


async def test_a_resumed_session_run_retracts_a_step_whose_packet_a_power_loss_tore(
    tmp_path: Path,
) -> None:
    """spec: ATT-21, STEP-21: the step files are not synced, so a power loss may
    keep a step file whole beside a packet it tore or took; before its started row
    (after which `next` hands the run's steps out) the process retracts each such
    step of a call waiting on it, so no subagent is spawned on that packet. A step
    whose packet is whole keeps its file."""
    run, spec = _run(tmp_path)
    text = "# Task\n\nFind the bug.\n"
    rows: list[Any] = []
    for call in ("explore.1", "build.1"):
        packet = bus.step_paths(run, call, 1, 1)[0]
        workspace = str(run.calls / call)
        rows += [
            Prepared(
                call=call,
                node=call.split(".")[0],
                role="explorer",
                backend="session",
                allocation=Allocation(workspace=workspace, kind="directory"),
                input_digest="sha256:0",
            ),
            StepPublished(
                call=call,
                k=1,
                op=f"{call}/t1",
                marker=f"{call}/t1-a1",
                attempt=1,
                action="spawn",
                input="spawn",
                input_digest=digest("spawn"),
                packet=str(packet),
                packet_digest=digest(text),
                role="explorer",
                agent_type="explorer",
                workspace=workspace,
                conversation_turn=1,
            ),
        ]
        step = bus.StepFile(
            call=call, k=1, attempt=1, op=f"{call}/t1", marker=f"{call}/t1-a1",
            role="explorer", action="spawn", agent_type="explorer", model=None,
            reasoning_effort=None, message="spawn", packet=str(packet), workspace=workspace,
            agent_id=None,
        )  # fmt: skip
        bus.write_step(run, step, text)
    bus.step_paths(run, "build.1", 1, 1)[0].write_text(text[:6])  # torn
    async with open_journal_writer(run.journal) as journal:
        await journal.commit(rows)
    await run_process(run, spec, run.root.parents[1])
    assert read_journal(run.journal).rows[-1]["row"] == "paused"  # its host is not there
    assert [s.call for s in bus.list_steps(run)] == ["explore.1"]
