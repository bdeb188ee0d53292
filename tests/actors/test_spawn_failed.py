"""A spawn the host refuses: the owner's dispatch report of a failed spawn holds
the call `spawn_failed` with the host's message, and a retry spawns it again.

The harness of `test_session_run` runs the chain workflow (explore, build, review)
on the simulated host under one MockClock. The scripted owner reports build.1's
first spawn as failed, with the tool output codex gives for a model it does not
serve, instead of spawning it; every other step it spawns and leaves to the
marker lookup.
"""

from __future__ import annotations

from pathlib import Path

from trio.testing import MockClock

from crw.bus import inbox as reports
from crw.bus import steps as bus
from crw.engine.steps.task_name import task_name
from tests.actors.test_held_in_place import answer, packet_of
from tests.actors.test_session_resume import last
from tests.actors.test_session_run import PROTOCOLS, RUN_ID, Harness, harness, kinds

CALL = "build.1"
REFUSED = "Unknown model `gpt-5.4-mini` for spawn_agent. Available models: gpt-5.5, gpt-5.4"


def fail_first_spawn(h: Harness, sent: list[reports.Report]) -> None:
    """The owner reports build.1's first step as a spawn the host refused (the
    reports go in `sent`); it spawns every other step, unreported."""
    take = h.owner._take

    async def take_or_fail(step: bus.StepFile) -> str:
        if (step.call, step.k, step.attempt) != (CALL, 1, 1):
            return await take(step)
        sent.append(reports.Report.new(RUN_ID, CALL, 1, 1, None, "t", failed=REFUSED))
        reports.write_report(h.run, sent[-1])
        return ""

    h.owner._take = take_or_fail  # type: ignore[method-assign]
    h.owner.report = False


@PROTOCOLS
async def test_failed_spawn_report_holds_the_call_with_the_hosts_message(
    tmp_path: Path, autojump_clock: MockClock, multi_agent: str
) -> None:
    """A dispatch report without a subagent for the step the call
    waits on, with the host's refusal, ends the call held spawn_failed (the held
    row's error is the tool output) before the reply; the step file is retracted,
    so no spawn is asked for it any more, and the run waits on a decision."""
    async with harness(tmp_path, multi_agent=multi_agent) as h:
        sent: list[reports.Report] = []
        fail_first_spawn(h, sent)
        state, rows = await h.go()
        steps = bus.list_steps(h.run)
        replies = [reports.read_reply(h.run, report.id) or {} for report in sent]
    assert state == "waiting_decision"
    assert kinds(rows, CALL) == ["prepared", "step_published", "held"]
    held = last(rows, "held")
    assert {k: held.get(k) for k in ("call", "reason", "error", "tokens")} == {
        "call": CALL,
        "reason": "spawn_failed",
        "error": REFUSED,
        "tokens": None,
    }
    assert [(r["reply"], r["reason"], r["agent_id"]) for r in replies] == [
        ("held", f"spawn_failed: {REFUSED}", None)
    ]
    assert [step.call for step in steps] == []
    assert kinds(rows, "review.1") == []


async def test_call_held_for_a_failed_spawn_answered_retry_spawns_a_new_attempt(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: ATT-30: answered retry, the call spawns its turn again as
    attempt 2 at the next k (the refused step reached nobody: no turn to replace),
    its packet says why attempt 1 stopped, and the run ends completed."""
    async with harness(tmp_path) as h:
        fail_first_spawn(h, [])
        _, held = await h.go()
        answer(h.run, "retry")
        state, rows = await h.go()
    assert kinds(rows[len(held) :], CALL) == [
        "decision",
        "step_published",
        "thread_started",
        "turn_started",
        "completed",
    ]
    step = last(rows, "step_published")
    assert (
        step["call"],
        step["k"],
        step["attempt"],
        step["action"],
        step.get("replaces_turn"),
    ) == (
        CALL,
        2,
        2,
        "spawn",
        None,
    )
    assert f"held (spawn_failed: {REFUSED})" in packet_of(step)
    assert state == "ended" and rows[-1]["status"] == "completed"


async def test_on_v2_a_spawn_refused_as_taken_already_holds_nothing_and_binds_the_child(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """On multi-agent v2 codex keeps one child per task name: the owner that took a
    spawn step twice gets `agent path … already exists` the second time. Reported
    --failed, it holds nothing: the report is refused naming the child, and the run
    binds that child by its name (docs/session.md, "Multi-agent v2")."""
    async with harness(tmp_path, report=False, multi_agent="v2") as h:
        take, sent = h.owner._take, []

        async def twice(step: bus.StepFile) -> str:
            path = await take(step)
            if (step.call, step.k, step.attempt) == (CALL, 1, 1):
                refused = f"agent path `{path}` already exists"
                sent.append(reports.Report.new(RUN_ID, CALL, 1, 1, None, "t", failed=refused))
                reports.write_report(h.run, sent[-1])
            return path

        h.owner._take = twice  # type: ignore[method-assign]
        state, rows = await h.go()
        (reply,) = [reports.read_reply(h.run, report.id) or {} for report in sent]
    path = f"/root/{task_name(h.run.id, f'{CALL}/t1-a1')}"
    assert (reply["reply"], reply["reason"]) == (
        "refused",
        f"{path} is the step's subagent, spawned already: report it with --agent {path}, "
        "or leave it: the run binds it by its task name",
    )
    assert "held" not in kinds(rows, CALL)
    assert state == "ended" and rows[-1]["status"] == "completed"


async def test_on_v2_a_child_given_another_task_at_the_steps_name_holds_the_call(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """On multi-agent v2 the child's task is read from its rollout where it is plain
    (offline codex, the simulated host): the owner spawns build.1's child by the
    step's task name but with another step's message. The run binds nothing (the
    marker line is not the step's) and, the name being taken for good, holds the
    call spawn_failed; answered retry, attempt 2 spawns under its own name and the
    run ends completed. spec: DISP-4 (the marker turn), ATT-30"""
    async with harness(tmp_path, report=False, multi_agent="v2") as h:
        take_v2 = h.owner._take_v2

        async def wrong_message(step: bus.StepFile) -> str:
            if (step.call, step.k, step.attempt) == (CALL, 1, 1):
                other = step.message.replace(f"{CALL}/t1-a1", f"{CALL}/t7-a1", 1)
                step = bus.StepFile(**{**step.__dict__, "message": other})
            return await take_v2(step)

        h.owner._take_v2 = wrong_message  # type: ignore[method-assign]
        state, held = await h.go()
        assert state == "waiting_decision", held[-3:]
        answer(h.run, "retry")
        state, rows = await h.go()
    path = f"/root/{task_name(h.run.id, f'{CALL}/t1-a1')}"
    hold = last(held, "held")
    assert (hold["call"], hold["reason"]) == (CALL, "spawn_failed")
    assert hold["error"].startswith(f"the child {path} at the step's task name was given another")
    assert "thread_started" not in kinds(held, CALL)
    assert kinds(rows[len(held) :], CALL)[-3:] == ["thread_started", "turn_started", "completed"]
    assert state == "ended" and rows[-1]["status"] == "completed"
