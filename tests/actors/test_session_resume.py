"""The resume table: a session call goes on from its last row (spec: ATT-16..27).

Each test builds the journal a dead run process would have left: the harness of
`test_session_run` runs with a kill point emulated in process (the journal
writer's `after_commit` cancels the run right after the chosen row is durable,
before the run acts on it, as `CRW_CRASH_AFTER` SIGKILLs a run process), the test
plays what the owner did meanwhile, and a fresh `run_session_calls` goes on over
the same run directory and host. The owner survives the run, as Codex's owner
thread does: it remembers the steps it took and takes each once.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import trio
from trio.testing import MockClock

import tests.actors.test_session_run as session_run
from crw.actors.journal_writer import open_journal_writer
from crw.bus import inbox as reports
from crw.bus import steps as bus
from crw.engine.run.rundir import RunDir
from crw.journal.log import encode_batch, encode_body, read_journal
from crw.journal.rows import RowModel, parse_row
from tests.actors.test_session_run import PROTOCOLS, RUN_ID, Harness, Owner, harness, kinds

Rows = list[dict[str, Any]]
CALL = "build.1"
TOKENS = {"input": 100, "cachedInput": 0, "output": 10, "reasoningOutput": 0}


@dataclass
class RememberingOwner(Owner):
    """The owner thread across a run process's death: each step is taken and
    reported once, whatever the step files show again."""

    taken: dict[tuple[str, int, int], str] = field(default_factory=dict)
    dies_after: tuple[str, int] | None = None
    """The step (call, k) right after whose take (and report) the run dies."""
    kill: trio.CancelScope | None = None

    async def play(self) -> None:
        while True:
            for step in await trio.to_thread.run_sync(bus.list_steps, self.run):
                key = (step.call, step.k, step.attempt)
                if key in self.taken:
                    continue
                self.taken[key] = agent = await self._take(step)
                if self.report:
                    report(self.run, step.call, step.k, agent)
                if (step.call, step.k) == self.dies_after and self.kill is not None:
                    self.kill.cancel()  # no checkpoint since the take: the run saw none of it
            for close in bus.list_closes(self.run):
                if self.v2:
                    params = {"parentThreadId": self.thread_id, "target": close.agent_id}
                    await self.client.request("sim/v2/interruptAgent", params)
                else:
                    await self.client.request("sim/closeAgent", {"target": close.agent_id})
                bus.remove_close(self.run, close.call, close.attempt, close.agent_id)
            await trio.sleep(0.5)

    async def thread_of(self, key: tuple[str, int, int]) -> str:
        """The thread id of the subagent the owner took step `key` on (on v2 it
        holds the child's path)."""
        agent = self.taken[key]
        return await self.child(agent) if self.v2 and agent.startswith("/root/") else agent


def report(run: RunDir, call: str, k: int, agent: str) -> reports.Report:
    """The owner's dispatch report of `agent` for `call`'s step k (attempt 1)."""
    written = reports.Report.new(RUN_ID, call, k, 1, agent, "t")
    reports.write_report(run, written)
    return written


@dataclass
class KillPoint:
    """Cancels the run right after the n-th commit holding a `kind` row of `call`."""

    kind: str
    call: str
    nth: int = 1
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    seen: int = 0

    def after_commit(self, rows: Sequence[RowModel]) -> None:
        if any(getattr(r, "row", None) == self.kind and r.call == self.call for r in rows):
            self.seen += 1
            if self.seen == self.nth:
                self.scope.cancel()


async def run_until_killed(
    h: Harness, monkeypatch: pytest.MonkeyPatch, kind: str, nth: int = 1
) -> Rows:
    """Run the harness until `kind`#`nth` of CALL is durable; the journal it left."""
    kill = KillPoint(kind, CALL, nth)
    writer = functools.partial(open_journal_writer, after_commit=kill.after_commit)
    with monkeypatch.context() as patch:
        patch.setattr(session_run, "open_journal_writer", writer)
        with kill.scope:
            await h.go()
    assert kill.scope.cancelled_caught, f"the run ended before {kind}#{nth} of {CALL}"
    rows = read_journal(h.run.journal).rows
    assert kinds(rows, CALL).count(kind) == nth
    return rows


async def run_until_owner_took(h: Harness, owner: RememberingOwner, k: int) -> Rows:
    """Run the harness until the owner took CALL's step k (spawned or sent it, and
    reported it when it reports); the run dies before it sees any of that."""
    owner.dies_after, owner.kill = (CALL, k), trio.CancelScope()
    with owner.kill:
        await h.go()
    assert owner.kill.cancelled_caught, f"the run ended before the owner took {CALL} t{k}"
    owner.dies_after = owner.kill = None
    return read_journal(h.run.journal).rows


def remembering(h: Harness, *, report: bool = True) -> RememberingOwner:
    h.owner = RememberingOwner(h.client, h.run, h.owner.thread_id, report=report, v2=h.owner.v2)
    return h.owner


def last(rows: Rows, kind: str, call: str = CALL) -> dict[str, Any]:
    return [r for r in rows if r["row"] == kind and r.get("call") == call][-1]


def marker_turns(h: Harness, marker: str) -> int:
    """How many turns on the owner's subagents start with `marker` (on v2, how many
    tasks the children were given do: a task is no thread item)."""
    count = 0
    for thread in h.sim.state.threads.values():
        if thread.parent_thread_id != h.owner.thread_id:
            continue
        if thread.agent_path is not None:
            count += sum(task.startswith(f"crw-flow-op: {marker}\n") for task in thread.tasks)
            continue
        for turn in thread.turns:
            user = next(i for i in turn.items if i["type"] == "userMessage")
            count += user["content"][0]["text"].startswith(f"crw-flow-op: {marker}\n")
    return count


async def test_last_row_prepared_publishes_the_first_step_in_the_same_directory(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: ATT-16, ATT-17: a journal whose last row of the call is prepared (a
    process of an earlier crw committed it alone; this one commits the first
    step's row with it)."""
    async with harness(tmp_path) as h:
        remembering(h)
        await run_until_killed(h, monkeypatch, "prepared")
        drop_row(h.run.journal, "step_published", CALL)
        dead = read_journal(h.run.journal).rows
        workspace = trio.Path(last(dead, "prepared")["allocation"]["workspace"])
        await workspace.mkdir(parents=True, exist_ok=True)  # the earlier process made P
        await (workspace / "left-by-the-dead-process").write_text("kept")
        state, rows = await h.go()
    assert state == "ended" and rows[-1]["status"] == "completed"
    assert kinds(rows[len(dead) :], CALL) == [
        "step_published",
        "thread_started",
        "turn_started",
        "completed",
    ]
    assert kinds(rows, CALL).count("prepared") == 1
    assert last(rows, "step_published")["workspace"] == str(workspace)
    assert last(rows, "thread_started")["cwd"] == str(workspace)
    assert await (workspace / "left-by-the-dead-process").read_text() == "kept"


async def test_last_row_step_published_answers_the_waiting_report_first(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: ATT-18"""
    async with harness(tmp_path, poll=600) as h:  # a report binds before any lookup
        owner = remembering(h)
        dead = await run_until_owner_took(h, owner, k=1)
        assert kinds(dead, CALL)[-1] == "step_published"
        (waiting,) = reports.read_reports(h.run)
        state, rows = await h.go()
        reply = reports.read_reply(h.run, waiting.id)
        still_waiting = reports.report_path(h.run, waiting.id).exists()
    assert kinds(rows[len(dead) :], CALL) == ["thread_started", "turn_started", "completed"]
    assert last(rows, "thread_started")["thread_id"] == waiting.agent_id
    assert not still_waiting
    assert reply is not None and reply["reply"] == "bound", reply
    assert state == "ended" and rows[-1]["status"] == "completed"


@pytest.mark.parametrize(
    "left", [b"", b"# Task\n\nHalf of it", None], ids=["empty", "torn", "gone"]
)
async def test_last_row_step_published_mends_a_packet_a_power_loss_took(
    tmp_path: Path, autojump_clock: MockClock, left: bytes | None
) -> None:
    """spec: ATT-18, ATT-21, STEP-21: the packet is not synced, so a power loss may
    leave it empty, torn or gone while the step file and the owner's report
    survive; the resumed call writes it again from its step_published row before it
    answers the report (which binds the step with no other write of its files)."""
    async with harness(tmp_path, poll=600) as h:
        owner = remembering(h)
        dead = await run_until_owner_took(h, owner, k=1)
        step = last(dead, "step_published")
        packet, step_file = bus.step_paths(h.run, CALL, 1, 1)
        assert step_file.exists()  # the step survived: the owner took it
        whole = packet.read_bytes()
        if left is None:
            packet.unlink()
        else:
            packet.write_bytes(left)
        assert not bus.packet_whole(h.run, CALL, 1, 1, step["packet_digest"])
        state, rows = await h.go()
    assert kinds(rows[len(dead) :], CALL) == ["thread_started", "turn_started", "completed"]
    assert packet.read_bytes() == whole
    assert bus.packet_whole(h.run, CALL, 1, 1, step["packet_digest"])
    assert state == "ended" and rows[-1]["status"] == "completed"


@PROTOCOLS
async def test_last_row_step_published_binds_a_spawn_found_by_its_marker(
    tmp_path: Path, autojump_clock: MockClock, multi_agent: str
) -> None:
    """spec: ATT-19"""
    async with harness(tmp_path, multi_agent=multi_agent) as h:
        owner = remembering(h, report=False)
        dead = await run_until_owner_took(h, owner, k=1)
        assert kinds(dead, CALL)[-1] == "step_published"
        state, rows = await h.go()
        turns = marker_turns(h, f"{CALL}/t1-a1")
        taken = await owner.thread_of((CALL, 1, 1))
    assert kinds(rows[len(dead) :], CALL) == ["thread_started", "turn_started", "completed"]
    assert last(rows, "thread_started")["thread_id"] == taken
    assert turns == 1
    assert state == "ended" and rows[-1]["status"] == "completed"


@PROTOCOLS
async def test_last_row_step_published_binds_a_repair_turn_and_sends_it_once(
    tmp_path: Path, autojump_clock: MockClock, multi_agent: str
) -> None:
    """spec: ATT-19, ATT-20"""
    async with harness(tmp_path, multi_agent=multi_agent) as h:
        owner = remembering(h, report=False)
        await h.script({"marker": f"{CALL}/*"}, invalidFirst=True)
        dead = await run_until_owner_took(h, owner, k=2)
        assert kinds(dead, CALL)[-1] == "step_published"
        assert last(dead, "step_published")["action"] == "send_input"
        state, rows = await h.go()
        turns = marker_turns(h, f"{CALL}/t2-a1")
    assert kinds(rows[len(dead) :], CALL) == ["turn_started", "completed"]
    assert last(rows, "turn_started")["marker"] == f"{CALL}/t2-a1"
    assert turns == 1
    assert state == "ended" and rows[-1]["status"] == "completed"


@PROTOCOLS
async def test_last_row_step_published_with_nothing_spawned_publishes_it_again(
    tmp_path: Path, autojump_clock: MockClock, multi_agent: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: ATT-21"""
    async with harness(tmp_path, multi_agent=multi_agent) as h:
        remembering(h)
        dead = await run_until_killed(h, monkeypatch, "step_published")
        _, step_file = bus.step_paths(h.run, CALL, 1, 1)
        assert not step_file.exists()  # the process died before it wrote the file
        state, rows = await h.go()
        turns = marker_turns(h, f"{CALL}/t1-a1")
    assert kinds(rows[len(dead) :], CALL) == ["thread_started", "turn_started", "completed"]
    assert (CALL, 1, 1) in h.owner.taken  # type: ignore[attr-defined]
    assert turns == 1
    assert state == "ended" and rows[-1]["status"] == "completed"


@PROTOCOLS
async def test_last_row_step_published_repair_with_nothing_sent_publishes_it_again(
    tmp_path: Path, autojump_clock: MockClock, multi_agent: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: ATT-21, ATT-20"""
    async with harness(tmp_path, multi_agent=multi_agent) as h:
        remembering(h)
        await h.script({"marker": f"{CALL}/*"}, invalidFirst=True)
        dead = await run_until_killed(h, monkeypatch, "step_published", nth=2)
        state, rows = await h.go()
        rows = read_journal(h.run.journal).rows
        turns = marker_turns(h, f"{CALL}/t2-a1")
    assert kinds(rows[len(dead) :], CALL) == ["turn_started", "completed"]
    assert turns == 1
    assert state == "ended" and rows[-1]["status"] == "completed"


def drop_row(journal: Path, kind: str, call: str) -> None:
    """Rewrite `journal` without its last `kind` row of `call`, each row its own
    batch, the seqs contiguous: a journal whose last row of the call is the one
    before (an earlier crw wrote thread_started alone)."""
    rows = read_journal(journal).rows
    index = max(i for i, r in enumerate(rows) if r["row"] == kind and r.get("call") == call)
    kept = rows[:index] + rows[index + 1 :]
    journal.write_bytes(
        b"".join(
            encode_batch(seq, str(row["at"]), [encode_body(parse_row(row))])
            for seq, row in enumerate(kept, start=1)
        )
    )


async def test_last_row_thread_started_adopts_the_subagent_and_writes_only_its_turn(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: ATT-22, ATT-25"""
    async with harness(tmp_path) as h:
        owner = remembering(h)
        await run_until_killed(h, monkeypatch, "thread_started")
        drop_row(h.run.journal, "turn_started", CALL)
        dead = read_journal(h.run.journal).rows
        assert kinds(dead, CALL)[-1] == "thread_started"
        spawned = len(owner.spawned)
        state, rows = await h.go()
        turns = marker_turns(h, f"{CALL}/t1-a1")
        _, step_file = bus.step_paths(h.run, CALL, 1, 1)
        left = step_file.exists()
    assert kinds(rows[len(dead) :], CALL) == ["turn_started", "completed"]
    started = last(rows, "thread_started")
    turn = last(rows, "turn_started")
    thread = h.sim.state.threads[started["thread_id"]]
    assert turn["turn_id"] == thread.turns[0].id and turn["marker"] == f"{CALL}/t1-a1"
    assert turns == 1
    assert [a for a in owner.spawned[spawned:] if a == started["thread_id"]] == []
    assert not left, "the adopted call left its step file for the owner to take again"
    assert state == "ended" and rows[-1]["status"] == "completed"


@pytest.mark.parametrize("turn", ["completed", "running"])
async def test_last_row_turn_started_retracts_the_step_and_reads_the_turn(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch, turn: str
) -> None:
    """spec: ATT-26, ATT-27"""
    async with harness(tmp_path) as h:
        remembering(h)
        await h.script({"marker": f"{CALL}/*"}, seconds=100)
        dead = await run_until_killed(h, monkeypatch, "turn_started")
        _, step_file = bus.step_paths(h.run, CALL, 1, 1)
        assert step_file.exists()  # the dead process did not retract it
        bound = last(dead, "thread_started")["thread_id"]
        if turn == "completed":
            await trio.sleep(200)
        status = h.sim.state.threads[bound].turns[0].status
        state, rows = await h.go()
        left = step_file.exists()
    assert status == ("completed" if turn == "completed" else "inProgress")
    assert not left
    assert kinds(rows[len(dead) :], CALL) == ["completed"]
    assert state == "ended" and rows[-1]["status"] == "completed"


@pytest.mark.parametrize("kind", ["step_published", "turn_started"])
async def test_recovered_repair_turn_counts_every_token_once(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """spec: HARV-21, HARV-23"""
    async with harness(tmp_path) as h:
        owner = remembering(h, report=False)
        await h.script({"marker": f"{CALL}/*"}, invalidFirst=True, tokens=TOKENS)
        dead = await run_until_killed(h, monkeypatch, kind, nth=2)
        repair = [r for r in dead if r["row"] == "step_published" and r["call"] == CALL][1]
        if kind == "step_published":
            params = {"target": repair["agent_id"], "message": repair["input"]}
            await h.client.request("sim/sendInput", params)
            owner.taken[(CALL, 2, 1)] = repair["agent_id"]
        state, rows = await h.go()
    assert repair["tokens_seen"]["input"] == 100 and repair["call_tokens"]["input"] == 100
    done = last(rows, "completed")
    assert done["tokens"]["input"] == 200 and done["tokens"]["output"] == 20
    assert state == "ended" and rows[-1]["status"] == "completed"


OWN_TURNS = frozenset({"turn/start", "thread/start", "thread/fork"})
"""What would start a turn or a thread of the run's own: a session run sends none."""


def host_requests(h: Harness, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, dict[str, Any]]]:
    """Filled with each request the run sends the host from now on (method, params);
    the scripted owner's `sim/*` requests are the owner's, not the run's."""
    sent: list[tuple[str, dict[str, Any]]] = []
    request = h.client.request

    async def spy(method: str, params: Any = None) -> dict[str, Any]:
        if not method.startswith("sim/"):
            sent.append((method, dict(params or {})))
        return await request(method, params)

    monkeypatch.setattr(h.client, "request", spy)
    return sent


@pytest.mark.parametrize(
    ("kind", "nth"),
    [("step_published", 2), ("turn_started", 1), ("turn_started", 2)],
    ids=["repair-published-not-sent", "task-turn-running", "repair-turn-running"],
)
async def test_a_resumed_session_run_starts_no_turn_and_resumes_no_thread_of_its_own(
    tmp_path: Path,
    autojump_clock: MockClock,
    monkeypatch: pytest.MonkeyPatch,
    kind: str,
    nth: int,
) -> None:
    """spec: ATT-14: whatever row the dead process left last, the resumed session
    run never takes the App Server's ways: no live resend of the step (turn/start
    on the subagent) and no reconcile (thread/resume of the call's thread, which
    carries the config keys, then a turn of its own). The owner sends the repair
    the run publishes again; any thread/resume is only a subscription: excludeTurns
    and no overrides."""
    async with harness(tmp_path) as h:
        remembering(h)
        await h.script({"marker": f"{CALL}/t1-*"}, invalidFirst=True, seconds=100)
        await h.script({"marker": f"{CALL}/t2-*"}, seconds=100)
        dead = await run_until_killed(h, monkeypatch, kind, nth)
        sent = host_requests(h, monkeypatch)
        state, rows = await h.go()
        turns = marker_turns(h, f"{CALL}/t2-a1")
    assert state == "ended" and rows[-1]["status"] == "completed"
    assert kinds(rows[len(dead) :], CALL)[-1] == "completed"
    assert turns == 1
    methods = [method for method, _ in sent]
    assert "thread/read" in methods  # the spy sees the run's requests
    assert [m for m in methods if m in OWN_TURNS] == []
    resumes = [params for method, params in sent if method == "thread/resume"]
    assert all(set(params) == {"threadId", "excludeTurns"} for params in resumes), resumes
    assert all(params["excludeTurns"] is True for params in resumes), resumes
