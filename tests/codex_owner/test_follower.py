"""The test owners given a conversation, without a host: where the following
owner (follower.py) and the scripted one (policy.py's OwnerPolicy) end their turn
when `next` hands them the steps of one gate one at a time."""

from __future__ import annotations

import json
from typing import Any

import pytest

from crw.host.mock_replies import FunctionCall, ModelRequest
from tests.codex_owner.follower import FollowingOwner
from tests.codex_owner.policy import START_KEY, OwnerPolicy

RUN = "r-1"
NEXT = f"crw flow next {RUN} --wait 30 --state /s"


def said(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def step(call: str) -> dict[str, Any]:
    """A v2 spawn step of `call` as next answers it."""
    path = f"/root/crw_{RUN.replace('-', '')}_{call.replace('.', '_')}_t1_a1"
    return {
        "call": call,
        "k": 1,
        "attempt": 1,
        "op": f"{call}/t1",
        "action": "spawn",
        "reported": False,
        "host_call": {
            "tool": "spawn_agent",
            "namespace": "collaboration",
            "arguments": {"task_name": path.removeprefix("/root/"), "message": "m"},
            "then": f"crw flow dispatched {RUN} {call} --agent {path} --k 1 --attempt 1",
            "on_failure": f"crw flow dispatched {RUN} {call} --k 1 --attempt 1 --failed 'x'",
        },
    }


class Conversation:
    """The owner's conversation as codex sends it, built a tool call at a time."""

    def __init__(self) -> None:
        start = "crw flow start w.toml --json"
        self.input: list[dict[str, Any]] = [said(f"Own a crw flow run.\n{START_KEY}\n{start}\n")]
        self.shell(start, {"run": RUN, "next": NEXT})

    def call(self, name: str, arguments: dict[str, Any], output: str) -> None:
        call_id = f"c{len(self.input)}"
        item = {"type": "function_call", "call_id": call_id, "name": name}
        self.input.append(item | {"arguments": json.dumps(arguments)})
        self.input.append({"type": "function_call_output", "call_id": call_id, "output": output})

    def shell(self, cmd: str, answer: dict[str, Any]) -> None:
        self.call("exec_command", {"cmd": cmd}, f"Chunk ID: 1\nOutput:\n{json.dumps(answer)}\n")

    def take(self, taken: dict[str, Any]) -> None:
        """The step's spawn, then its `then`, as the owner makes them."""
        host_call = taken["host_call"]
        path = f"/root/{host_call['arguments']['task_name']}"
        self.call("spawn_agent", host_call["arguments"], json.dumps({"task_name": path}))
        self.shell(host_call["then"], {"reply": "bound", "call": taken["call"], "k": 1})

    def reply(self, owner: FollowingOwner | OwnerPolicy) -> str:
        """What the owner does next: the command it runs, or the words it ends on."""
        answer = owner(ModelRequest("/v1/responses", {"input": self.input}, "", None))
        if answer.kind == "text":
            return f"says {answer.text}"
        made: FunctionCall = answer.calls[0]
        return str(made.arguments.get("cmd", made.name))


@pytest.mark.parametrize("first", ["explore.1", "plan.1"])
def test_an_owner_resting_after_two_steps_handed_one_at_a_time_takes_both_first(
    first: str,
) -> None:
    """spec: CMD-NEXT-11, WAKE-1 (next answers as soon as one step is there, so the
    gate's two steps may come one answer each, in either order; a step published
    while the owner was busy wakes nobody, so the owner that ends its turn after
    its first step would leave the other untaken until the 15-minute
    renotification: it asks next again, and rests after the second)"""
    other = "plan.1" if first == "explore.1" else "explore.1"
    owner = FollowingOwner(rest_after=frozenset({"explore.1/t1", "plan.1/t1"}))
    talk = Conversation()
    talk.shell(f"{NEXT} --json", {"state": "running", "steps": [step(first)]})
    talk.take(step(first))
    assert talk.reply(owner) == f"{NEXT} --json"
    talk.shell(f"{NEXT} --json", {"state": "running", "steps": [step(other)]})
    talk.take(step(other))
    assert talk.reply(owner) == f"says resting after {other}/t1"


def test_an_owner_handed_both_steps_at_once_rests_after_the_second() -> None:
    """spec: CMD-NEXT-11 (both steps in one answer: taken in its order, then rest)"""
    owner = FollowingOwner(rest_after=frozenset({"explore.1/t1", "plan.1/t1"}))
    talk = Conversation()
    talk.shell(f"{NEXT} --json", {"state": "running", "steps": [step("explore.1"), step("plan.1")]})
    talk.take(step("explore.1"))
    assert talk.reply(owner) == "spawn_agent"
    talk.take(step("plan.1"))
    assert talk.reply(owner) == "says resting after plan.1/t1"


def test_the_scripted_owner_rests_once_it_dispatched_both_steps_handed_one_at_a_time() -> None:
    """spec: CMD-NEXT-11, WAKE-1 (as the following owner: plan.1 alone first, so
    it asks next again rather than rest, and rests after explore.1's bound report)"""
    owner = OwnerPolicy(rest_after=frozenset({"explore.1/t1", "plan.1/t1"}))
    again = f"crw flow next {RUN} --json --wait 5"
    talk = Conversation()
    talk.shell(again, {"state": "running", "steps": [step("plan.1")]})
    talk.take(step("plan.1"))
    assert talk.reply(owner) == again
    talk.shell(again, {"state": "running", "steps": [step("explore.1")]})
    talk.take(step("explore.1"))
    assert talk.reply(owner) == f"says run {RUN}: waiting for its wake"
