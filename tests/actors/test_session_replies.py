"""The replies a running session run gives the owner, and the subagents it closes.

In-process runs on the simulated host under one MockClock (the harness of
`test_session_run`): the scripted owner reports late, twice, wrongly or not at all,
and each test asserts the replies the owner read and the rows the run wrote.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import trio
from trio.testing import MockClock

from crw.bus import inbox as reports
from crw.bus import steps as bus
from crw.engine.config.roles import RolePair
from crw.engine.steps import lookup
from crw.engine.steps.bind import MAX_RETRIES
from crw.engine.steps.packet import spawn_message
from crw.host.sim.state import Thread as SimThread
from tests.actors.test_session_run import RUN_ID, Harness, harness, kinds

UNKNOWN = "019a0000-0000-7000-8000-00000000dead"
REPAIRED = [
    "prepared",
    "step_published",
    "thread_started",
    "turn_started",
    "step_published",
    "turn_started",
    "completed",
]
DONE = ["prepared", "step_published", "thread_started", "turn_started", "completed"]


async def report(h: Harness, call: str, k: int, attempt: int, agent: str | None) -> dict[str, Any]:
    """Report as `crw flow dispatched` does and wait for the run's reply."""
    sent = reports.Report.new(RUN_ID, call, k, attempt, agent, "t")
    reports.write_report(h.run, sent)
    while (reply := reports.read_reply(h.run, sent.id)) is None:  # noqa: ASYNC110
        await trio.sleep(0.1)  # the owner polls its reply as `dispatched` does
    return reply


async def spawn(h: Harness, step: bus.StepFile, message: str, **pair: str) -> str:
    params = {"parentThreadId": h.owner.thread_id, "agentType": step.agent_type, "message": message}
    answer = await h.client.request("sim/spawnAgent", params | pair)
    return str(answer["agentId"])


async def test_late_report_for_turn_1_while_the_repair_waits_is_answered_bound(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: DISP-6: a late report for the bound subagent is never answered close, and
    writes no row."""
    async with harness(tmp_path) as h:
        take, late = h.owner._take, []

        async def report_turn_1_again(step: bus.StepFile) -> str:
            if step.call == "build.1" and step.k == 2:  # the repair step waits
                late.append(await report(h, "build.1", 1, 1, step.agent_id))
            return await take(step)

        h.owner._take = report_turn_1_again  # type: ignore[method-assign]
        await h.script({"marker": "build.1/*"}, invalidFirst=True)
        state, rows = await h.go()
    assert [(r["reply"], r["reason"]) for r in late] == [("bound", "already bound")]
    assert kinds(rows, "build.1") == REPAIRED
    assert state == "ended" and rows[-1]["status"] == "completed"


async def test_report_repeating_a_bind_is_answered_bound_and_writes_nothing(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: DISP-6, BIND-7: the run's answer to a report no call actor waits for
    (its turn is bound and running), for the spawn and for the send_input turn."""
    async with harness(tmp_path) as h:
        take, again = h.owner._take, []

        async def report_twice(step: bus.StepFile) -> str:
            agent = await take(step)
            if step.call == "build.1":
                first = await report(h, step.call, step.k, step.attempt, agent)
                again.append((first, await report(h, step.call, step.k, step.attempt, agent)))
            return agent

        h.owner._take = report_twice  # type: ignore[method-assign]
        h.owner.report = False
        await h.script({"marker": "build.1/*"}, invalidFirst=True, seconds=60)
        state, rows = await h.go()
    assert [(a["reply"], b["reply"], b["reason"]) for a, b in again] == [
        ("bound", "bound", "already bound")
    ] * 2
    assert kinds(rows, "build.1") == REPAIRED
    assert state == "ended"


async def test_report_after_the_call_was_answered_is_answered_close(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: DISP-13, on the run's path for a report no call actor waits for: the
    call's own subagent, answered, is told so plainly."""
    async with harness(tmp_path) as h:
        take, late = h.owner._take, []

        async def report_explore_late(step: bus.StepFile) -> str:
            if step.call == "build.1":  # explore.1 has its terminal row
                agent = next(r["thread_id"] for r in rows_of(h) if r["row"] == "thread_started")
                late.append(await report(h, "explore.1", 1, 1, agent))
            return await take(step)

        h.owner._take = report_explore_late  # type: ignore[method-assign]
        _, rows = await h.go()
    assert [(r["reply"], r["reason"]) for r in late] == [
        ("close", "already bound by its marker and answered; close it")
    ]
    assert kinds(rows, "explore.1") == DONE


def rows_of(h: Harness) -> list[dict[str, Any]]:
    lines = h.run.journal.read_text().splitlines()
    return [json.loads(line) for line in lines]


async def test_lookup_binds_the_unreported_respawn_after_a_pair_mismatch(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: DISP-25, DISP-8: the closed subagent on the wrong pair is never taken."""
    find, lookups = lookup.find_spawned, []

    def bounded(*args: Any) -> Any:
        lookups.append(args[0])
        assert len(lookups) < 100, "the step waits forever: the lookup never binds"
        return find(*args)

    monkeypatch.setattr(lookup, "find_spawned", bounded)
    async with harness(tmp_path) as h:
        take, answers = h.owner._take, []

        async def wrong_pair_then_unreported_respawn(step: bus.StepFile) -> str:
            if step.call != "explore.1":
                return await take(step)
            wrong = await spawn(h, step, step.message, model="other", reasoningEffort="low")
            h.sim.state.threads[wrong].created_at -= 60  # the earliest, whatever the wall clock
            answers.append(await report(h, step.call, step.k, step.attempt, wrong))
            await h.client.request("sim/closeAgent", {"target": wrong})
            return await take(step)

        h.owner._take = wrong_pair_then_unreported_respawn  # type: ignore[method-assign]
        h.owner.report = False
        pairs = {"explorer": RolePair(agent_type="explorer", model="gpt-5.5", effort="high")}
        state, rows = await h.go(pairs)
    assert answers[0]["reply"] == "pair_mismatch"
    started = [r for r in rows if r["row"] == "thread_started" and r["call"] == "explore.1"]
    assert [r["thread_id"] for r in started] == h.owner.spawned[:1]
    assert started[0]["model"] == "gpt-5.5" and state == "ended"


def bound_one_and_closed(
    h: Harness, state: str, rows: list[dict[str, Any]], other: SimThread
) -> None:
    """explore.1 bound its owner's first spawn and completed, warned several_spawns
    once, and `other`, the spawn it did not bind, was closed by its close step."""
    started = [r for r in rows if r["row"] == "thread_started" and r["call"] == "explore.1"]
    assert [r["thread_id"] for r in started] == [h.owner.spawned[0]]
    warnings = [r for r in rows if r["row"] == "session_host_warning"]
    assert [(r["op"], r["warnings"]) for r in warnings] == [("explore.1/t1", ["several_spawns"])]
    assert kinds(rows, "explore.1") == [*DONE[:4], "session_host_warning", "completed"]
    assert other.status == "notLoaded"  # the owner took its close step
    assert state == "ended"


async def test_second_spawn_for_one_step_gets_a_close_step_and_one_warning(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: DISP-16, DISP-25 (session_host_warning several_spawns): a spawn never
    reported, then another that is reported; the run binds one and closes the other."""
    async with harness(tmp_path, poll=600) as h:
        take, first = h.owner._take, []

        async def spawn_twice(step: bus.StepFile) -> str:
            if step.call == "explore.1":
                first.append(await spawn(h, step, step.message))
            return await take(step)

        h.owner._take = spawn_twice  # type: ignore[method-assign]
        state, rows = await h.go()
        threads = h.sim.state.threads
    [orphan] = first
    bound_one_and_closed(h, state, rows, threads[orphan])


async def test_a_spawn_after_the_bind_never_reported_is_closed_when_the_turn_ends(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: ROWS-14 (session_host_warning several_spawns), DISP-25: the
    owner spawns explore.1 and reports it; once the run bound it (the step file is
    retracted), the owner spawns the same step again and never reports it. The
    bound turn ends: the run closes the duplicate (a close step, the owner closes
    it), writes several_spawns once, and completes with the first subagent's answer."""
    async with harness(tmp_path) as h:
        await h.script({"marker": "explore.1/*"}, seconds=30)
        take, again = h.owner._take, []

        async def spawn_again_after_the_bind(step: bus.StepFile) -> None:
            while any(s.call == "explore.1" for s in bus.list_steps(h.run)):  # noqa: ASYNC110
                await trio.sleep(0.1)
            again.append(await spawn(h, step, step.message))

        async with trio.open_nursery() as nursery:

            async def spawn_then_again(step: bus.StepFile) -> str:
                if step.call == "explore.1" and step.k == 1:
                    nursery.start_soon(spawn_again_after_the_bind, step)
                return await take(step)

            h.owner._take = spawn_then_again  # type: ignore[method-assign]
            state, rows = await h.go()
        threads = h.sim.state.threads
    [duplicate] = again
    bound_one_and_closed(h, state, rows, threads[duplicate])


async def test_a_subagent_whose_rollout_reads_empty_at_first_is_bound_all_the_same(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: DISP-9, DISP-25. The host refuses the reported subagent's first reads
    as codex 0.169 does while its rollout file is made and not yet written
    ("rollout at <path> is empty", with its turns and without): the owner's report
    gets retry, never refused or close, and the call is bound by its marker at the
    next poll and completes, its rows as on a host that read it at once."""
    async with harness(tmp_path) as h:
        await h.script({"marker": "explore.1/*"}, emptyRollout=3)
        state, rows = await h.go()
        answered = [reports.read_reply(h.run, p.stem) for p in h.run.replies.glob("*.json")]
    mine = [(r["reply"], r["reason"]) for r in answered if r and r["call"] == "explore.1"]
    assert mine == [("retry", "the marker turn cannot be read yet")]
    assert kinds(rows, "explore.1") == DONE and state == "ended"


async def test_report_naming_a_thread_the_host_does_not_have_is_refused(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: DISP-9: retry is for a host that cannot answer now, not for a wrong id."""
    async with harness(tmp_path) as h:
        take, answers = h.owner._take, []

        async def report_a_wrong_id_first(step: bus.StepFile) -> str:
            if step.call == "explore.1":
                answers.append(await report(h, step.call, step.k, step.attempt, UNKNOWN))
            return await take(step)

        h.owner._take = report_a_wrong_id_first  # type: ignore[method-assign]
        state, rows = await h.go()
    assert [(r["reply"], r["reason"]) for r in answers] == [
        ("refused", f"the host has no thread {UNKNOWN}: report the agent_id spawn_agent answered")
    ]
    assert kinds(rows, "explore.1") == DONE and state == "ended"


async def test_retry_for_one_report_is_bounded_and_then_says_why(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: DISP-4, DISP-9: a subagent whose turn carries no marker."""
    async with harness(tmp_path, poll=600) as h:
        take, answers = h.owner._take, []

        async def report_an_unmarked_spawn(step: bus.StepFile) -> str:
            if step.call == "explore.1":
                unmarked = await spawn(h, step, "Find the files, please.")
                for _ in range(MAX_RETRIES + 1):
                    answers.append(await report(h, step.call, step.k, step.attempt, unmarked))
                await h.client.request("sim/closeAgent", {"target": unmarked})
            return await take(step)

        h.owner._take = report_an_unmarked_spawn  # type: ignore[method-assign]
        state, rows = await h.go()
    assert [r["reply"] for r in answers] == ["retry"] * MAX_RETRIES + ["refused"]
    assert "close it and spawn again with the step's message" in answers[-1]["reason"]
    assert kinds(rows, "explore.1") == DONE and state == "ended"


async def test_late_report_of_another_runs_subagent_while_the_repair_waits_is_refused(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: DISP-10: while build.1's repair waits, the owner reports, for its bound
    turn 1, a subagent another run's step spawned on the same owner: the call's
    actor reads it on the host and refuses it naming that run, not close; the run
    writes no row and no close step for it, and completes."""
    async with harness(tmp_path) as h:
        take = h.owner._take
        late: list[dict[str, Any]] = []
        theirs: list[str] = []

        async def report_another_runs_subagent(step: bus.StepFile) -> str:
            if step.call == "build.1" and step.k == 2 and not late:  # the repair step waits
                packet = "/state/flow/run-x/steps/build.1/packet-t1-a1.md"
                message = spawn_message("build.1", 1, 1, "executor", "/work/x", packet)
                theirs.append(await spawn(h, step, message))
                late.append(await report(h, "build.1", 1, 1, theirs[0]))
            return await take(step)

        h.owner._take = report_another_runs_subagent  # type: ignore[method-assign]
        await h.script({"marker": "build.1/*"}, invalidFirst=True)
        state, rows = await h.go()
        closes = [close.agent_id for close in bus.list_closes(h.run)]
        assert h.sim.state.threads[theirs[0]].status != "notLoaded"  # the owner never closed it
    assert [(r["reply"], r["reason"]) for r in late] == [
        ("refused", "the subagent carries run run-x's step")
    ]
    assert kinds(rows, "build.1") == REPAIRED
    assert theirs[0] not in [r.get("thread_id") for r in rows]
    assert theirs[0] not in closes
    assert state == "ended" and rows[-1]["status"] == "completed"


async def test_a_spawn_after_the_calls_terminal_row_never_reported_is_closed(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: ROWS-14 (session_host_warning several_spawns), DISP-16, DISP-25: the
    owner spawns explore.1's step again once explore.1 has completed (its step
    file long gone) and never reports it. While build.1 runs, the marker search
    finds it: explore.1's op gets several_spawns once, after its completed row,
    then the duplicate a close step, which the owner takes."""
    async with harness(tmp_path) as h:
        state, rows, duplicate = await _spawn_explore_again_once_it_ended(h)
        threads = h.sim.state.threads
    started = [r for r in rows if r["row"] == "thread_started" and r["call"] == "explore.1"]
    assert [r["thread_id"] for r in started] == [h.owner.spawned[0]]
    assert kinds(rows, "explore.1") == [*DONE, "session_host_warning"]
    [warning] = [r for r in rows if r["row"] == "session_host_warning"]
    assert (warning["call"], warning["op"], warning["warnings"]) == (
        "explore.1",
        "explore.1/t1",
        ["several_spawns"],
    )
    build_ends = [i for i, r in enumerate(rows) if r["row"] == "completed"]
    assert build_ends[0] < rows.index(warning) < build_ends[1]  # while build.1 ran
    assert threads[duplicate].status == "notLoaded"  # the owner took its close step
    assert state == "ended"


async def test_a_late_duplicates_close_step_that_cannot_be_written_is_written_again(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: ROWS-14, STEP-28: its row is written once, its close step at the next
    look, and the run goes on."""
    write_close, failed = bus.write_close, list[str]()

    def full_once(run: Any, call: str, attempt: int, agent: str, **kw: Any) -> None:
        if call == "explore.1" and not failed and agent not in h.owner.spawned:
            failed.append(agent)
            raise OSError(28, "No space left on device")
        write_close(run, call, attempt, agent, **kw)

    monkeypatch.setattr(bus, "write_close", full_once)
    async with harness(tmp_path) as h:
        state, rows, duplicate = await _spawn_explore_again_once_it_ended(h)
        threads = h.sim.state.threads
    assert failed == [duplicate] and threads[duplicate].status == "notLoaded"
    assert kinds(rows, "explore.1") == [*DONE, "session_host_warning"]
    assert state == "ended"


async def _spawn_explore_again_once_it_ended(h: Harness) -> tuple[str, list[dict[str, Any]], str]:
    """The run, its owner spawning explore.1's step again, unreported, once
    build.1's step shows (explore.1 has its terminal row); build.1 runs 30 s."""
    await h.script({"marker": "build.1/*"}, seconds=30)
    take, explore, again = h.owner._take, [], []

    async def spawn_explore_again(step: bus.StepFile) -> str:
        if step.call == "explore.1":
            explore.append(step)
        if step.call == "build.1":
            again.append(await spawn(h, explore[0], explore[0].message))
        return await take(step)

    h.owner._take = spawn_explore_again  # type: ignore[method-assign]
    state, rows = await h.go()
    [duplicate] = again
    return state, rows, duplicate


@pytest.mark.parametrize("late", [0.0, 2.0], ids=["at-once", "as-the-lookup-looks"])
async def test_a_step_spawned_three_times_is_warned_about_once(
    tmp_path: Path, autojump_clock: MockClock, late: float
) -> None:
    """spec: ROWS-14, DISP-16: a duplicate found at the bind, then another spawned
    after the call's terminal row: both closed, one several_spawns row (the
    journal's, read again before the second is written). `late`: the owner's first
    look at the steps, the second as the call's marker lookup looks (its poll
    interval), before the owner spawns: the bind's look for strays is a later one."""
    async with harness(tmp_path, poll=2.0) as h:
        take, explore, extra, play = h.owner._take, [], [], h.owner.play

        async def late_play() -> None:
            await trio.sleep(late)
            await play()

        h.owner.play = late_play  # type: ignore[method-assign]

        async def spawn_before_and_after(step: bus.StepFile) -> str:
            if step.call == "explore.1":
                explore.append(step)
                extra.append(await spawn(h, step, step.message))
            if step.call == "build.1":
                extra.append(await spawn(h, explore[0], explore[0].message))
            return await take(step)

        h.owner._take = spawn_before_and_after  # type: ignore[method-assign]
        await h.script({"marker": "build.1/*"}, seconds=30)
        state, rows = await h.go()
        threads = h.sim.state.threads
    warnings = [r for r in rows if r["row"] == "session_host_warning"]
    assert [(r["op"], r["warnings"]) for r in warnings] == [("explore.1/t1", ["several_spawns"])]
    assert kinds(rows, "explore.1") == [*DONE[:4], "session_host_warning", "completed"]
    assert [threads[agent].status for agent in extra] == ["notLoaded", "notLoaded"]
    assert state == "ended"
