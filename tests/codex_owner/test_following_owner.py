"""A session run owned by a real Codex owner thread whose model knows nothing of
crw's commands (follower.py's FollowingOwner): it runs only what the start's
answer, a step (`then`, `on_failure`) or a wake spells out, placeholders filled
from the tool's output. It still takes the run to its end, reports a spawn the
host refuses (the step's `on_failure`) so the call is held spawn_failed and goes
on once answered, and picks the run up again from a wake. Each runs on
multi-agent v1 and v2 (`multi_agent`): on v2 the steps name the `collaboration`
tools, and the owner makes them as named."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import pytest
import trio

from crw.host.mock_model import CODEX_MODEL, MockModel
from tests.codex_owner.follower import FollowingOwner, Item, conversation
from tests.codex_owner.harness import PAIRS, RUN_LIMIT, TERMINAL, OwnedRun, owned_run, roles_toml
from tests.codex_owner.policy import Policies, SubagentPolicy, is_subagent
from tests.codex_owner.test_drills import WAKE_LINE, arrived, thread_turns
from tests.codex_owner.test_owned_run import CALLS, USAGE, markers_asked, spoken

pytestmark = pytest.mark.codex

REFUSED_MODEL = "gpt-5.4-mini"
ONE_TURN = ["prepared", "step_published", "thread_started", "turn_started", "completed"]
REPAIRED = [*ONE_TURN[:-1], "step_published", "turn_started", "completed"]
"""build.1's rows when its first answer breaks the contract: the repair is a
send_input step on the same subagent."""


def owner_items(model: MockModel) -> list[Item]:
    """The owner's conversation as its newest request carries it."""
    bodies = [r.body for r in model.requests if not is_subagent(r.body)]
    return conversation(bodies[-1])


def last_words(model: MockModel) -> str:
    """The owner's last final message."""
    said = [r.reply for r in model.requests if not is_subagent(r.body) and r.reply is not None]
    return next((reply.text for reply in reversed(said) if reply.kind == "text"), "")


def commands(items: list[Item]) -> list[str]:
    return [item.cmd for item in items if item.kind == "shell"]


def call_rows(rows: list[dict[str, Any]], call: str) -> list[str]:
    return [row["row"] for row in rows if row.get("call") == call]


async def owner_said(setup: OwnedRun, times: int = 1) -> None:
    """Once the owner's model has ended `times` turns (a final message) and its
    thread is idle."""
    with trio.fail_after(RUN_LIMIT):
        while True:
            said = [
                r
                for r in setup.model.requests
                if not is_subagent(r.body) and r.reply is not None and r.reply.kind == "text"
            ]
            if len(said) >= times:
                break
            await trio.sleep(0.1)
    await setup.owner_idle()


async def test_an_owner_that_follows_only_what_crw_spells_runs_the_workflow(
    tmp_path: Path, multi_agent: str
) -> None:
    """spec: CMD-NEXT-5, CMD-NEXT-6, STEP-37 (four calls, one repaired by a
    send_input, each completed; every command the owner ran was the start's, its
    `next`, or a step's `then` with the subagent's id put in)"""
    subagent = SubagentPolicy(broken=frozenset({"build.1/t1"}), usage=USAGE)
    with owned_run(
        tmp_path, Policies(FollowingOwner(), subagent), multi_agent=multi_agent
    ) as setup:
        await setup.begin()
        ended = await setup.until_row("ended")
        await owner_said(setup)
        rows = setup.rows()
        items = owner_items(setup.model)
        asked = markers_asked(setup.model.requests)

    assert ended["status"] == "completed", rows
    assert spoken(rows) == {multi_agent}
    assert (rows[0]["row"], rows[-1]["row"]) == ("started", "ended")
    for call in CALLS:
        assert call_rows(rows, call) == (REPAIRED if call == "build.1" else ONE_TURN), call
    build = [(r["k"], r["attempt"], r["action"]) for r in rows if r["row"] == "step_published"]
    assert sorted(build) == sorted([(1, 1, "spawn")] * 4 + [(2, 1, "send_input")])
    ran = commands(items)
    verbs = [shlex.split(cmd)[2] for cmd in ran]
    assert verbs[:2] == ["start", "next"] and verbs.count("dispatched") == 5, ran
    assert not [cmd for cmd in ran if "--failed" in cmd], ran
    tools = [item.tool for item in items if item.kind == "tool"]
    if multi_agent == "v1":
        assert sorted(tools) == sorted(["spawn_agent"] * 4 + ["send_input"] + ["close_agent"] * 4)
    else:  # the repair is a follow-up; an ended call's idle child needs no close
        assert sorted(tools) == sorted(["spawn_agent"] * 4 + ["followup_task"])
    assert items[-1].answer["state"] == "ended" and items[-1].answer["steps"] == []
    assert set(asked) == {f"crw-flow-op: {c}/t1-a1" for c in CALLS} | {"crw-flow-op: build.1/t2-a1"}
    assert set(asked.values()) == {1}, asked


async def test_a_refused_spawn_is_reported_by_its_steps_on_failure_and_retried(
    tmp_path: Path, multi_agent: str
) -> None:
    """spec: CMD-NEXT-5, WAKE-1 (the role store gives the reviewer a model codex
    refuses: the owner runs the spawn step's `on_failure` with the tool's output, the
    call is held spawn_failed with that output; the role store fixed and the call
    answered with the retry command next names, its next attempt is published, a
    wake brings the idle owner back and the run completes)"""
    pairs = PAIRS | {"reviewer": ("reviewer", REFUSED_MODEL, "low")}
    with owned_run(
        tmp_path, Policies(FollowingOwner(), SubagentPolicy()), pairs, multi_agent=multi_agent
    ) as setup:
        await setup.begin()
        await owner_said(setup)
        run, held_rows = setup.run_id(), setup.rows()
        items = owner_items(setup.model)
        (setup.state / "roles.toml").write_text(roles_toml(PAIRS))
        assert "held" in items[-1].answer, f"the owner stopped: {last_words(setup.model)}"
        retry = items[-1].answer["held"][0]["answer"]["retry"]
        answered = setup.crw(*shlex.split(retry)[1:], "--json")
        ended = await setup.until_row("ended")
        await owner_said(setup, 2)
        rows = setup.rows()
        woken = owner_items(setup.model)

    refused = next(i for i in items if i.tool == "spawn_agent" and REFUSED_MODEL in i.output)
    assert f"Unknown model `{REFUSED_MODEL}` for spawn_agent" in refused.output
    failed = [cmd for cmd in commands(items) if "--failed" in cmd]
    assert failed == [
        f"crw flow dispatched {run} review.1 --k 1 --attempt 1 "
        f"--failed {shlex.quote(refused.output)} --state {setup.state}"
    ]
    assert call_rows(held_rows, "review.1") == ["prepared", "step_published", "held"]
    held = next(r for r in held_rows if r["row"] == "held")
    assert (held["call"], held["reason"], held["error"]) == (
        "review.1",
        "spawn_failed",
        refused.output,
    )
    assert (items[-1].answer["state"], items[-1].answer["steps"]) == ("waiting_decision", [])
    assert retry == f"crw flow answer {run} review.1 --retry --state {setup.state}"
    assert answered.returncode == 0, answered.stderr
    assert ended["status"] == "completed", rows
    assert spoken(rows) == {multi_agent}
    assert call_rows(rows, "review.1") == [
        "prepared",
        "step_published",
        "held",
        "decision",
        "step_published",
        "thread_started",
        "turn_started",
        "completed",
    ]
    again = [r for r in rows if r["row"] == "step_published" and r["call"] == "review.1"][1]
    assert (again["k"], again["attempt"], again["action"]) == (2, 2, "spawn")
    kinds = [r["row"] for r in rows]
    at = kinds.index("decision")
    assert kinds[at + 1 : at + 3] == ["started", "policy_repinned"], kinds
    wake = kinds.index("session_wake", at)
    assert kinds[wake + 1] == "message_delivery" and rows[wake + 1]["via"] == "turn"
    review = [r for r in rows if r["row"] == "thread_started" and r["call"] == "review.1"]
    assert [(r["model"], r["effort"], r["attempt"]) for r in review] == [(CODEX_MODEL, "low", 2)]
    user = [i.said for i in woken if i.kind == "user"]
    assert len(user) == 2 and user[1].startswith(WAKE_LINE), user


async def test_a_wake_brings_the_following_owner_back_to_the_run(
    tmp_path: Path, multi_agent: str
) -> None:
    """spec: WAKE-1, WAKE-2, WAKE-8 (the owner ends its turn once it took explore.1
    and plan.1, in whichever order next handed them out; build.1 is published to the
    idle owner, the wake's turn runs the command the wake spells, and the owner
    takes the run to its end)"""
    subagent = SubagentPolicy()
    subagent.hold("plan.1/t1-a1")
    owner = FollowingOwner(rest_after=frozenset({"explore.1/t1", "plan.1/t1"}))
    with owned_run(tmp_path, Policies(owner, subagent), multi_agent=multi_agent) as setup:
        await setup.begin()
        await arrived(setup.policies, "plan.1/t1-a1")
        await owner_said(setup)
        first = owner_items(setup.model)
        subagent.release()
        ended = await setup.until_row("ended")
        await owner_said(setup, 2)
        rows = setup.rows()
        items = owner_items(setup.model)
        turns = await thread_turns(setup, setup.owner)

    assert ended["status"] == "completed", rows
    assert spoken(rows) == {multi_agent}
    assert {r["call"]: r["row"] for r in rows if r["row"] in TERMINAL} == dict.fromkeys(
        CALLS, "completed"
    )
    ran = [shlex.split(cmd)[2:5] for cmd in commands(first)]
    assert ran[-1][0] == "dispatched", ran
    dispatched = sorted(call for verb, run, call in ran if verb == "dispatched")
    assert dispatched == ["explore.1", "plan.1"], ran
    kinds = [(r["row"], r.get("call")) for r in rows]
    wake = kinds.index(("session_wake", None))
    assert kinds[wake - 1] == ("step_published", "build.1"), kinds
    assert kinds[wake + 1] == ("message_delivery", None), kinds
    delivery = rows[wake + 1]
    assert (delivery["via"], delivery["status"], delivery["turn_id"]) == (
        "turn",
        "delivered",
        turns[1]["id"],
    )
    said = [i for i in items if i.kind == "user"]
    assert said[1].said.startswith(WAKE_LINE) and "build.1/t1" in said[1].said
    spelled = said[1].said.rsplit("Take them with: ", 1)[1].strip()
    after_wake = items[items.index(said[1]) + 1]
    assert after_wake.cmd == spelled and "build.1" in str(after_wake.answer["steps"])
