"""Binding on multi-agent v2 by task name: the name, the child the owner's thread
names, the bind decision and the step's v2 host call, over host snapshots shaped as
the real codex showed them (tests/host/test_codex_multi_agent_v2.py)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crw.engine.config.roles import RolePair
from crw.engine.owner.host_call_v2 import close_call_v2, tool_call_v2, wait_call_v2
from crw.engine.steps.bind import AttemptState, Bound, Reply
from crw.engine.steps.bind_v2 import (
    already_spawned,
    decide_bind_v2,
    decide_failed_v2,
    spawned_child,
    step_task_name,
)
from crw.engine.steps.step_file import CloseStep, StepFile
from crw.engine.steps.task_name import agent_path, name_of_path, task_name
from crw.host.protocol import SubAgentActivity, Thread
from tests.engine.test_bind import (
    AGENT,
    OWNER,
    PAIR,
    RUN,
    host_turn,
    repair_step,
    spawn_step,
    subagent,
)

NAME = task_name(RUN, "build.1/t1-a1")
PATH = agent_path(NAME)


def agent_message(text: str = "{}") -> dict[str, Any]:
    return {"type": "agentMessage", "id": "resp_3_item0", "text": text, "phase": "final_answer"}


def v2_child(path: str = PATH, turns: list[dict[str, Any]] | None = None, **fields: Any) -> Thread:
    """A v2 child as thread/read shows it: its path in source, no role, no preview,
    and turns holding no user message."""
    source = {
        "subAgent": {
            "thread_spawn": {
                "parent_thread_id": OWNER,
                "depth": 1,
                "agent_path": path,
                "agent_nickname": "Nash",
                "agent_role": None,
            }
        }
    }
    base: dict[str, Any] = {
        "source": source,
        "agentRole": None,
        "preview": "",
        "canAcceptDirectInput": False,
        "turns": [host_turn("turn-1", agent_message())] if turns is None else turns,
    }
    return subagent(**(base | fields))


def activity(
    kind: str, path: str, thread_id: str, item_id: str = "call_resp_1_0"
) -> dict[str, Any]:
    return {
        "type": "subAgentActivity",
        "id": item_id,
        "kind": kind,
        "agentThreadId": thread_id,
        "agentPath": path,
        "model": "gpt-5.5" if kind == "started" else None,
        "reasoningEffort": "high" if kind == "started" else None,
    }


def owner_thread(*items: dict[str, Any]) -> Thread:
    user = {"type": "userMessage", "id": "u1", "content": [{"type": "text", "text": "go"}]}
    return subagent(
        id=OWNER,
        parentThreadId=None,
        source="vscode",
        turns=[host_turn("owner-turn-1", user, *items)],
    )


def test_task_name_is_codex_shaped_deterministic_and_per_run_and_marker() -> None:
    """Within v2's `[a-z0-9_]`, at most 57 characters, the same for the same step,
    different across runs and across markers the tail alone would blur."""
    name = task_name(RUN, "build.1/t1-a1")
    assert re.fullmatch(r"crw_[0-9a-f]{12}_build_1_t1_a1", name)
    assert name == task_name(RUN, "build.1/t1-a1")
    assert name != task_name("run-2", "build.1/t1-a1")
    assert task_name(RUN, "a.b/t1-a1") != task_name(RUN, "a_b/t1-a1")
    assert name_of_path(agent_path(name)) == name
    assert name_of_path("/root/explorer") is None
    assert name_of_path(None) is None


@given(st.text(min_size=1, max_size=300), st.text(min_size=1, max_size=300))
def test_every_task_name_is_taken_by_codex(run: str, marker: str) -> None:
    """Codex refuses a name outside `[a-z0-9_]` (seen: `agent_name must use only
    lowercase letters, digits, and underscores`); 200 characters were taken."""
    name = task_name(run, marker)
    assert re.fullmatch(r"[a-z0-9_]{1,57}", name)
    assert name_of_path(agent_path(name)) == name


def test_the_owner_thread_names_the_child_of_a_task_name() -> None:
    owner = owner_thread(
        activity("started", agent_path("crw_000000000000_other"), "other-thread", "c0"),
        activity("started", PATH, AGENT),
        activity("completed", PATH, AGENT, "subagent-completed-1"),
    )
    assert isinstance(owner.turns[0].items[1], SubAgentActivity)
    assert spawned_child(owner, NAME) == AGENT
    assert spawned_child(owner, task_name(RUN, "build.1/t1-a2")) is None


def test_a_spawn_binds_the_child_at_its_task_name_without_a_role_check() -> None:
    """spec: DISP-3, DISP-5, BIND-5: the child's path stands where v1's marker and
    packet stand; its first turn is the marker turn; no agent type is compared
    (a v2 spawn asks for none)."""
    decision = decide_bind_v2(OWNER, spawn_step(), AttemptState(), PAIR, AGENT, v2_child())
    assert isinstance(decision, Bound), decision
    assert decision.warnings == []
    assert decision.thread_started is not None
    assert decision.thread_started.thread_id == AGENT
    assert decision.thread_started.session_agent_role_mismatch is None
    assert decision.turn_started.turn_id == "turn-1"
    assert decision.turn_started.marker == "build.1/t1-a1"


def test_a_child_at_another_name_is_refused() -> None:
    """spec: DISP-10: another run's step of the same marker has another name."""
    other = agent_path(task_name("run-2", "build.1/t1-a1"))
    decision = decide_bind_v2(OWNER, spawn_step(), AttemptState(), PAIR, AGENT, v2_child(other))
    assert decision == Reply(
        "refused", f"the subagent {other} carries another step or run's task name"
    )
    plain = decide_bind_v2(
        OWNER, spawn_step(), AttemptState(), PAIR, AGENT, v2_child("/root/explorer")
    )
    assert isinstance(plain, Reply) and plain.kind == "refused"
    assert "not spawned with a task name of the run" in plain.reason


def test_owner_pair_and_unread_turn_checks_hold_on_v2() -> None:
    """spec: DISP-3, DISP-5, DISP-9, DISP-16"""
    step = spawn_step()
    not_owners = decide_bind_v2(
        OWNER, step, AttemptState(), PAIR, AGENT, v2_child(parentThreadId="x")
    )
    assert not_owners == Reply("refused", "not a subagent of the owner thread")
    other_pair = decide_bind_v2(
        OWNER, step, AttemptState(), PAIR, AGENT, v2_child(reasoningEffort="low")
    )
    assert isinstance(other_pair, Reply) and other_pair.kind == "pair_mismatch"
    no_turn = decide_bind_v2(OWNER, step, AttemptState(), PAIR, AGENT, v2_child(turns=[]))
    assert no_turn == Reply("retry", "the step's turn cannot be read yet")
    unread = decide_bind_v2(OWNER, step, AttemptState(), PAIR, AGENT, None)
    assert isinstance(unread, Reply) and unread.kind == "retry"
    second = decide_bind_v2(OWNER, step, AttemptState(thread_id="first"), PAIR, AGENT, v2_child())
    assert second == Reply("close", "a second subagent for a bound attempt")
    undecided = decide_bind_v2(
        OWNER,
        step,
        AttemptState(),
        RolePair(agent_type="executor", model=None, effort=None),
        AGENT,
        v2_child(),
    )
    assert isinstance(undecided, Bound) and undecided.warnings == ["pair_unchecked"]


def test_a_follow_up_binds_the_first_child_turn_after_the_previous_steps() -> None:
    """spec: BIND-5, BIND-7: a follow-up's turn shows no message either; it is the
    child's turn after the one the attempt's previous step bound."""
    turns = [host_turn("turn-1", agent_message()), host_turn("turn-2", agent_message())]
    child = v2_child(turns=turns)
    step = repair_step()
    decision = decide_bind_v2(OWNER, step, AttemptState(), PAIR, AGENT, child, after_turn="turn-1")
    assert isinstance(decision, Bound), decision
    assert decision.thread_started is None
    assert decision.turn_started.turn_id == "turn-2"
    waits = decide_bind_v2(OWNER, step, AttemptState(), PAIR, AGENT, child, after_turn="turn-2")
    assert waits == Reply("retry", "the step's turn cannot be read yet")


def test_a_spawn_refused_for_its_own_name_is_no_failure() -> None:
    """Codex refuses a second child of one name (`agent path ... already exists`):
    the step was taken twice, its child exists, and the call is not held."""
    step = spawn_step()
    failed = f"agent path `{agent_path(step_task_name(step))}` already exists"
    assert already_spawned(step, failed)
    decision = decide_failed_v2(step, AttemptState(), failed)
    assert isinstance(decision, Reply) and decision.kind == "refused"
    assert f"--agent {PATH}" in decision.reason
    other = decide_failed_v2(step, AttemptState(), "Unknown model `x` for spawn_agent.")
    assert getattr(other, "kind", None) == "held"


def step_file(**fields: Any) -> StepFile:
    base: dict[str, Any] = {
        "call": "build.1",
        "k": 1,
        "attempt": 1,
        "op": "build.1/t1",
        "marker": "build.1/t1-a1",
        "role": "executor",
        "action": "spawn",
        "agent_type": "executor",
        "model": "gpt-5.5",
        "reasoning_effort": "high",
        "message": "crw-flow-op: build.1/t1-a1\n…",
        "packet": "/state/p.md",
        "workspace": "/w",
        "agent_id": None,
    }
    return StepFile(**(base | fields))


def test_the_v2_host_call_of_each_step() -> None:
    """A spawn names the step's task name and forces no history; a repair is a
    followup_task; a close interrupts; a wait takes no targets, 10 s at least."""
    spawn = tool_call_v2(step_file(), RUN)
    assert spawn == {
        "tool": "spawn_agent",
        "namespace": "collaboration",
        "arguments": {
            "task_name": NAME,
            "message": "crw-flow-op: build.1/t1-a1\n…",
            "model": "gpt-5.5",
            "reasoning_effort": "high",
            "fork_turns": "none",
        },
    }
    repair = tool_call_v2(
        step_file(action="send_input", agent_id=AGENT, marker="build.1/t2-a1"), RUN
    )
    assert repair["tool"] == "followup_task"
    assert repair["arguments"] == {"target": AGENT, "message": "crw-flow-op: build.1/t1-a1\n…"}
    with pytest.raises(ValueError, match="names no subagent"):
        tool_call_v2(step_file(action="send_input"), RUN)
    assert close_call_v2(CloseStep("build.1", 1, AGENT))["tool"] == "interrupt_agent"
    assert wait_call_v2(500)["arguments"] == {"timeout_ms": 10_000}
