"""The run process meets a fault: a host that goes away, a file it cannot write.

The whole run process (`run_process`) runs in process on the simulated host under
one MockClock: its connection to the host is an in-memory stream the test can cut,
and the owner (`tests.actors.test_session_run.Owner`) has a connection of its own
that stays up, as Codex's owner thread does. A write fault is injected below the
file functions (`os.write` of the files under one directory, an `os.open` that
fails), so the code that names the file is the code under test.
"""

from __future__ import annotations

import errno
import os
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from trio.testing import MockClock

from crw.actors import effect_proofs
from crw.actors import run as run_module
from crw.actors.run import run_process
from crw.bus import steps as bus
from crw.clock import fixed_clock
from crw.engine.config.workflow import load_workflow
from crw.engine.run.launch_record import holds_launch, read_failure, stamps
from crw.engine.run.rundir import RunDir
from crw.engine.run.runspec import Backend, RunSpec, WorkflowRef
from crw.errors import RefusedError
from crw.host.client import HostClient, open_client
from crw.host.sim.connection import connect_in_memory, serve_connection
from crw.host.sim.server import SimHost, open_sim_host
from crw.host.transport import JsonLinesTransport
from crw.journal.log import read_journal
from crw.settings import Settings
from tests.actors.test_app_server_run import CHAIN
from tests.actors.test_session_run import RUN_ID, Owner, kinds

Rows = list[dict[str, Any]]
SETTINGS = Settings(poll_interval=2.0, host_poll_interval=30.0)
CALLS = ("explore.1", "build.1", "review.1")


@dataclass
class Links:
    """The run processes' connections to the host, each one the test can cut."""

    sim: SimHost
    ends: list[JsonLinesTransport] = field(default_factory=list)

    @asynccontextmanager
    async def connect(self, uri: Any, **_: Any) -> AsyncIterator[HostClient]:
        client, server = trio.testing.memory_stream_pair()
        end = JsonLinesTransport(server, name="a client")
        self.ends.append(end)
        self.sim.nursery.start_soon(serve_connection, self.sim, end)
        async with open_client(JsonLinesTransport(client, name="the simulated host")) as host:
            yield host

    async def cut(self) -> None:
        """The host goes away: every connection a run process opened is closed."""
        for end in self.ends:
            await end.aclose()


def linked_run(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    sim: SimHost,
    text: str,
    backend: Backend = "session",
    owner: str | None = None,
) -> tuple[Links, RunDir, RunSpec]:
    """A run of `text` in `tmp_path/state` (its workflow `tmp_path/wf.toml`) whose
    process connects to `sim` through the links returned, each one the test can cut."""
    workflow_path = tmp_path / "wf.toml"
    workflow_path.write_text(text)
    workflow = load_workflow(workflow_path)
    run_dir = RunDir.of(tmp_path / "state", RUN_ID)
    run_dir.create()
    links = Links(sim)
    monkeypatch.setattr(run_module, "connect_host", links.connect)
    spec = RunSpec(
        id=RUN_ID,
        workflow=WorkflowRef(path=str(workflow_path), digest=workflow.digest),
        backend=backend,
        pool=workflow.pool,
        host="unix:/nowhere.sock",
        owner=owner,
    )
    return links, run_dir, spec


@dataclass
class Run:
    dir: RunDir
    spec: RunSpec
    state: Path
    owner: Owner

    async def process(self) -> str:
        return await run_process(
            self.dir, self.spec, self.state, clock=fixed_clock(), settings=SETTINGS
        )

    def rows(self) -> Rows:
        return read_journal(self.dir.journal).rows


@asynccontextmanager
async def session_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, scripts: Sequence[dict[str, Any]] = ()
) -> AsyncIterator[tuple[Run, Links, SimHost]]:
    """A session run of CHAIN on a simulated host, with its owner playing."""
    async with (
        open_sim_host(tmp_path / "home") as sim,
        open_client(await connect_in_memory(sim)) as owner_client,
    ):
        owner_id = str((await owner_client.request("sim/startOwner", {}))["threadId"])
        for script in scripts:
            await owner_client.request("sim/script", script)
        links, run_dir, spec = linked_run(tmp_path, monkeypatch, sim, CHAIN, owner=owner_id)
        run = Run(run_dir, spec, tmp_path / "state", Owner(owner_client, run_dir, owner_id))
        async with trio.open_nursery() as nursery:
            nursery.start_soon(run.owner.play)
            yield run, links, sim
            nursery.cancel_scope.cancel()


async def when_written(run: Run, kind: str, call: str) -> None:
    """Return once a `kind` row of `call` is durable (polling, as a reader does)."""
    while kind not in kinds(run.rows(), call):  # noqa: ASYNC110
        await trio.sleep(0.1)


def marker_turns(sim: SimHost, owner: str) -> dict[str, int]:
    """How many turns the owner's subagents ran for each marker."""
    counts: dict[str, int] = {}
    for thread in sim.state.threads.values():
        if thread.parent_thread_id != owner:
            continue
        for turn in thread.turns:
            user = next(i for i in turn.items if i["type"] == "userMessage")
            marker = user["content"][0]["text"].split("\n", 1)[0]
            counts[marker] = counts.get(marker, 0) + 1
    return counts


def assert_completed_once(run: Run, sim: SimHost) -> None:
    rows = run.rows()
    assert rows[-1]["row"] == "ended" and rows[-1]["status"] == "completed"
    assert [kinds(rows, call).count("completed") for call in CALLS] == [1, 1, 1]
    assert "held" not in {row["row"] for row in rows}
    assert set(marker_turns(sim, run.owner.thread_id).values()) == {1}


async def test_host_that_goes_away_mid_turn_pauses_and_resume_goes_on_in_place(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A host that goes away while a turn runs pauses the run (host_unavailable);
    the call keeps its rows (no held host_failure), and the resumed process reads
    the same turn to its end: no turn is sent twice. spec: HARV-15"""
    slow = {"match": {"marker": "build.1/*"}, "behaviour": {"seconds": 60}}
    async with session_run(tmp_path, monkeypatch, [slow]) as (run, links, sim):
        async with trio.open_nursery() as nursery:

            async def cut_mid_turn() -> None:
                await when_written(run, "turn_started", "build.1")
                await links.cut()

            nursery.start_soon(cut_mid_turn)
            assert await run.process() == "paused"
        paused = run.rows()
        assert await run.process() == "ended"
        assert_completed_once(run, sim)
    assert [row["row"] for row in paused][-1] == "paused"
    assert paused[-1]["reason"] == "host_unavailable" and paused[-1]["error"]
    assert kinds(paused, "build.1")[-1] == "turn_started"
    assert "held" not in {row["row"] for row in paused}
    resumed = run.rows()[len(paused) :]
    assert resumed[0]["row"] == "started"
    assert kinds(resumed, "build.1") == ["completed"]


async def test_host_that_goes_away_while_a_step_waits_pauses_the_run(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run whose calls only wait for the owner's report still sees the host go:
    the marker lookup of the waiting step pauses the run instead of polling a
    host that is gone. spec: DISP-25"""
    async with session_run(tmp_path, monkeypatch) as (run, links, sim):
        run.owner.report = False
        real_take = run.owner._take

        async def take_after_cut(step: bus.StepFile) -> str:
            if step.call == "build.1":
                await links.cut()
            return await real_take(step)

        run.owner._take = take_after_cut  # type: ignore[method-assign]
        assert await run.process() == "paused"
        paused = run.rows()
        assert await run.process() == "ended"
        assert_completed_once(run, sim)
    assert paused[-1]["row"] == "paused" and paused[-1]["reason"] == "host_unavailable"
    assert kinds(paused, "build.1")[-1] == "step_published"


def failing_writes(
    monkeypatch: pytest.MonkeyPatch, under: Path, code: int, until: Callable[[], bool]
) -> None:
    """`os.write` of a file under `under` fails with `code` until `until()` (the
    real one for every other file, the journal's among them)."""
    real = os.write

    def write(fd: int, data: Any) -> int:
        where = os.readlink(f"/proc/self/fd/{fd}")
        if where.startswith(str(under)) and not until():
            raise OSError(code, os.strerror(code))
        return real(fd, data)

    monkeypatch.setattr(os, "write", write)


async def test_reply_that_cannot_be_written_pauses_the_run_and_resume_loses_nothing(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full disk under replies/: the process stops with one line naming the file,
    the error and the fix, after a paused row (write_failed, error, file); the
    rows before it stay, and the resumed process answers the report and goes on."""
    cleared = {"now": False}
    async with session_run(tmp_path, monkeypatch) as (run, _, sim):
        failing_writes(monkeypatch, run.dir.replies, errno.ENOSPC, lambda: cleared["now"])
        with pytest.raises(RefusedError) as stopped:
            await run.process()
        paused = run.rows()
        cleared["now"] = True
        assert await run.process() == "ended"
        assert_completed_once(run, sim)
    line = str(stopped.value)
    assert "\n" not in line and str(run.dir.replies) in line
    assert "No space left on device (ENOSPC)" in line and "crw flow resume run-1" in line
    assert "free" in line
    last = paused[-1]
    assert (last["row"], last["reason"]) == ("paused", "write_failed")
    assert last["file"].startswith(str(run.dir.replies)) and "ENOSPC" in last["error"]
    assert kinds(paused, "explore.1")[-2:] == ["thread_started", "turn_started"]
    assert paused[: len(paused) - 1] == run.rows()[: len(paused) - 1]


async def test_call_directory_that_cannot_be_made_pauses_the_run(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run directory the process cannot write in (its calls/ refuses the call's
    directory): paused write_failed naming it; resumed, the call's directory is
    made and the run goes on."""
    refused = {"left": 1}
    real_mkdir = Path.mkdir

    def mkdir(self: Path, *args: Any, **kwargs: Any) -> None:
        if self.parent.name == "calls" and refused["left"]:
            refused["left"] -= 1
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(self))
        real_mkdir(self, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", mkdir)
    async with session_run(tmp_path, monkeypatch) as (run, _, sim):
        with pytest.raises(RefusedError, match="Permission denied"):
            await run.process()
        paused = run.rows()
        assert await run.process() == "ended"
        assert_completed_once(run, sim)
    assert paused[-1]["reason"] == "write_failed"
    assert paused[-1]["file"] == str(run.dir.root / "calls" / "explore.1")
    assert (run.dir.root / "calls" / "explore.1").is_dir()


async def test_journal_that_cannot_be_appended_stops_the_process_with_one_line(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An append to the journal fails (EIO): no row can record it, so the process
    stops with one line naming the journal; the journal keeps every durable row,
    and once the disk is back a resume goes on with no call run twice."""
    broken = {"now": False}
    async with session_run(tmp_path, monkeypatch) as (run, _, sim):
        failing_writes(monkeypatch, run.dir.journal, errno.EIO, lambda: not broken["now"])
        async with trio.open_nursery() as nursery:

            async def break_mid_run() -> None:
                await when_written(run, "turn_started", "build.1")
                broken["now"] = True

            nursery.start_soon(break_mid_run)
            with pytest.raises(RefusedError) as stopped:
                await run.process()
        kept = run.rows()
        broken["now"] = False
        assert await run.process() == "ended"
        assert_completed_once(run, sim)
    line = str(stopped.value)
    assert "\n" not in line and str(run.dir.journal) in line and "(EIO)" in line
    assert "crw flow resume run-1" in line
    assert kept[-1]["row"] != "paused"
    assert run.rows()[: len(kept)] == kept


async def test_immutable_journal_stops_the_process_before_any_row(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A journal that cannot be opened for appending (chattr +i: EPERM): the
    process stops with the one line, before its started row."""
    real_open = os.open

    def immutable(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if str(path).endswith("journal.jsonl") and flags & (os.O_WRONLY | os.O_RDWR):
            raise PermissionError(errno.EPERM, os.strerror(errno.EPERM), str(path))
        return real_open(path, flags, *args, **kwargs)

    async with session_run(tmp_path, monkeypatch) as (run, _, _):
        monkeypatch.setattr(os, "open", immutable)
        with pytest.raises(RefusedError) as stopped:
            await run.process()
        monkeypatch.setattr(os, "open", real_open)
        assert run.rows() == []
        assert read_failure(run.dir) is None  # before its started row: its launcher's to keep
    assert str(stopped.value) == (
        f"run {RUN_ID} stopped: cannot write its journal {run.dir.journal}: "
        f"Operation not permitted (EPERM); clear its immutable flag (chattr -i "
        f"{run.dir.journal}) or give this user write access to it, then go on with: "
        f"crw flow resume {RUN_ID} --detach"
    )


async def test_a_defect_deep_in_a_call_comes_out_alone(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An error that is no fault is raised as itself, not inside the exception
    groups of the nurseries it came through, and writes no paused row."""
    from crw.engine.answers import harvest

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise KeyError("a defect")

    monkeypatch.setattr(harvest, "decide", broken)
    async with session_run(tmp_path, monkeypatch) as (run, _, _):
        with pytest.raises(KeyError, match="a defect") as raised:
            await run.process()
        rows = run.rows()
    assert not isinstance(raised.value, BaseExceptionGroup)
    assert raised.value.__context__ is None
    assert "paused" not in {row["row"] for row in rows}
    failure = read_failure(run.dir)  # kept after the started row: next holds the launch
    assert failure is not None
    assert (failure.pid, failure.reason, failure.started) == (
        os.getpid(),
        f"KeyError: 'a defect' (see {run.dir.log})",
        True,
    )
    assert holds_launch(failure, stamps(run.dir, run.state))
    assert failure.told().startswith(f"its process {os.getpid()} stopped after its started row: ")


async def test_a_defect_before_the_started_row_keeps_no_record(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: CMD-NEXT-18; a process that stops before its started row leaves its
    launch to its launcher to keep (`Launch.settle`), a launch by hand to nobody"""

    async def broken(*args: Any, **kwargs: Any) -> None:
        raise KeyError("a defect")

    async with session_run(tmp_path, monkeypatch) as (run, _, _):
        monkeypatch.setattr(run_module, "_retract_torn", broken)
        with pytest.raises(KeyError, match="a defect"):
            await run.process()
        assert run.rows() == []
        assert read_failure(run.dir) is None


async def test_a_refusal_after_the_started_row_is_kept_for_next_and_cleared_by_the_next_process(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: CMD-NEXT-18; a process that stops on a refusal no row records, after its
    started row, keeps the refusal's line as its launch record (as a launch that
    stopped before its started row is kept), with the stamps of the files it could
    have stopped on; the process that next records a started row removes it."""
    line = "the ref refs/x stays locked (/r/refs/x.lock); remove that file, then resume the run"
    real_settle = effect_proofs.settle

    async def refused(*args: Any, **kwargs: Any) -> Any:
        raise RefusedError(line)

    async with session_run(tmp_path, monkeypatch) as (run, _, sim):
        monkeypatch.setattr(effect_proofs, "settle", refused)
        with pytest.raises(RefusedError, match="stays locked"):
            await run.process()
        assert run.rows()[-1]["row"] == "started"
        failure = read_failure(run.dir)
        assert failure is not None
        assert (failure.pid, failure.reason, failure.started) == (os.getpid(), line, True)
        assert holds_launch(failure, stamps(run.dir, run.state))
        monkeypatch.setattr(effect_proofs, "settle", real_settle)
        assert await run.process() == "ended"
        assert read_failure(run.dir) is None
        assert_completed_once(run, sim)


async def test_everything_a_session_run_writes_is_private_under_umask_0(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Directories 0700, files 0600, whatever the umask (the locks aside: they
    hold a pid, in the run's private directory)."""
    # The replies are checked as the run wrote them: the end's clean is not this test's.
    monkeypatch.setattr("crw.actors.run_end.clean_ended", lambda run: None)
    before = os.umask(0)
    try:
        async with session_run(tmp_path, monkeypatch) as (run, _, _):
            assert await run.process() == "ended"
    finally:
        os.umask(before)
    made = [run.dir.root, *run.dir.root.rglob("*")]
    assert (run.dir.root / "calls" / "build.1").is_dir() and run.dir.replies.iterdir()
    modes = {
        str(path.relative_to(run.dir.root)): path.stat().st_mode & 0o777
        for path in made
        if not path.name.endswith(".lock")
    }
    wrong = {
        path: oct(mode)
        for path, mode in modes.items()
        if mode != (0o700 if (run.dir.root / path).is_dir() else 0o600)
    }
    assert wrong == {}
    assert any(path.startswith("steps/build.1/packet-") for path in modes)
    assert any(path.startswith("replies/") for path in modes)
