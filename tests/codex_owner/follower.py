"""An owner thread's model that knows nothing of crw's commands: it runs only the
commands crw spells out to it, as a user's language model does from the owner's
instructions (docs/session.md, "The loop").

What it knows is what those instructions teach, no more:

- a user message (the one that begins its work, or a wake) spells the command to
  run: the first line that is a `crw` command, or ends in one after `: `;
- a command whose answer it reads gets `--json` (its answer is a JSON object);
- a start's answer names, under `next`, the command that takes the run's steps:
  it runs that command whenever it has no step to take;
- an answer with `steps` lists host calls: for each step not `reported` it makes
  `host_call.tool` with `host_call.arguments` unchanged, in `host_call.namespace`
  (a v2 run's `collaboration`; multi_agent_v1 when it names none), then runs the
  step's `then` with its placeholders filled from the tool's output
  (tests/codex_owner/fill.py); when the tool failed (the output cannot fill
  `then`, or a spawn's names no child: no `agent_id`, on v2 no `task_name`, as
  the skill says), it runs the step's `on_failure` filled the same way, and with
  no `on_failure` it can do nothing but stop and say so;
- an answer with `steps` empty and a `state` of ended, paused or waiting_decision
  ends its turn (a wake, or the user, brings the next one).

It keeps no state: each reply is decided from the conversation the request
carries, as a model's is. `rest_after`: ops it ends its turn after, instead of
asking for steps again (a test's way to let a wake start the next one): after
the `then` of the last of them it takes, once it has taken every one. Until then
it asks for steps as ever: `next` answers as soon as one step is there, so the
steps of one gate may come one answer at a time, in any order (each call
publishes its own), and an owner that rested after the first would leave the
others untaken, with no wake to bring it back (a step published to a busy owner
wakes none, WAKE-1).
"""

from __future__ import annotations

import itertools
import json
import re
from dataclasses import dataclass
from typing import Any

from crw.host.mock_replies import FunctionCall, ModelRequest, Reply, calls, text
from tests.codex_owner.fill import fill, values_of
from tests.codex_owner.policy import NAMESPACE, OWNER_USAGE, call_outputs, exec_call, shell_json

ENDS_TURN = frozenset({"ended", "paused", "waiting_decision"})
COMMAND = re.compile(r"^(?:.*?: )?(crw \S.*)$", re.MULTILINE)
SPAWNED = frozenset({"agent_id", "task_name"})
"""What a spawn that worked answers, on v1 and on v2: the child it made."""
NO_FAILURE_COMMAND = "the host call failed and the step names no command for its failure"


@dataclass(frozen=True)
class Item:
    """One thing of the owner's conversation: a user message (`said`), a shell
    command (`cmd`) or another tool call (`tool`, `arguments`), with its output."""

    kind: str  # user, shell or tool
    said: str = ""
    cmd: str = ""
    tool: str = ""
    arguments: dict[str, Any] | None = None
    output: str = ""

    @property
    def answer(self) -> dict[str, Any]:
        return shell_json(self.output) if self.kind == "shell" else {}


def conversation(body: dict[str, Any]) -> list[Item]:
    """The owner's conversation, oldest first (no environment context or subagent
    notification: neither asks anything)."""
    items = body.get("input") or []
    outputs = call_outputs(items)
    found: list[Item] = []
    for item in items:
        if item.get("type") == "function_call":
            arguments = json.loads(item.get("arguments") or "{}")
            output = outputs.get(item["call_id"], "")
            if item.get("name") == "exec_command":
                found.append(Item("shell", cmd=str(arguments.get("cmd", "")), output=output))
            else:
                found.append(
                    Item("tool", tool=str(item["name"]), arguments=arguments, output=output)
                )
        elif item.get("type") == "message" and item.get("role") == "user":
            said = "\n".join(p.get("text", "") for p in item.get("content") or [])
            if not said.startswith(("<environment_context>", "<subagent_notification>")):
                found.append(Item("user", said=said))
    return found


def taken_ops(items: list[Item]) -> set[str]:
    """The ops of the steps whose host call the owner made: of each answer's steps
    not reported, the first as many as the tool calls after it."""
    answers = [i for i, item in enumerate(items) if "steps" in item.answer] + [len(items)]
    ops: set[str] = set()
    for at, end in itertools.pairwise(answers):
        todo = [step for step in items[at].answer["steps"] if not step.get("reported")]
        made = sum(1 for item in items[at + 1 : end] if item.kind == "tool")
        ops |= {str(step.get("op")) for step in todo[:made]}
    return ops


def with_json(command: str) -> str:
    return command if "--json" in command.split() else f"{command} --json"


@dataclass
class FollowingOwner:
    """The owner's model; see the module docstring."""

    rest_after: frozenset[str] = frozenset()

    def __call__(self, request: ModelRequest) -> Reply:
        items = conversation(request.body)
        last = items[-1]
        if last.kind == "user":
            spelled = COMMAND.search(last.said)
            if spelled is None:
                return self.say(f"no command in: {last.said}")
            return exec_call(with_json(spelled.group(1)))
        if last.kind == "shell" and "steps" not in last.answer and last.answer.get("next"):
            return exec_call(with_json(str(last.answer["next"])))  # a start's answer
        at = max((i for i, item in enumerate(items) if "steps" in item.answer), default=None)
        if at is None:
            return self.take_steps(items)
        answer = items[at].answer
        todo = [step for step in answer["steps"] if not step.get("reported")]
        taken = [item for item in items[at + 1 :] if item.kind == "tool"]
        if taken:
            step = todo[len(taken) - 1]
            if last.kind == "tool" and "then" in step["host_call"]:
                return self.after_tool(step, last)
            if last.kind == "shell" and self.rests_after(step, items):
                return self.say(f"resting after {step['op']}")
        if len(taken) < len(todo):
            return self.host_call(todo[len(taken)])
        if not answer["steps"] and answer.get("state") in ENDS_TURN:
            return self.say(f"the run is {answer['state']}")
        return self.take_steps(items)

    def rests_after(self, step: dict[str, Any], items: list[Item]) -> bool:
        """Whether the owner ends its turn after `step`'s `then`: it is of
        `rest_after`, and every op of those is taken."""
        return step.get("op") in self.rest_after and self.rest_after <= taken_ops(items)

    def take_steps(self, items: list[Item]) -> Reply:
        """The command a start's answer named for the steps (`next`)."""
        named = [item.answer["next"] for item in items if item.answer.get("next")]
        if not named:
            return self.say("no command names the run's steps")
        return exec_call(with_json(str(named[-1])))

    def host_call(self, step: dict[str, Any]) -> Reply:
        call = step["host_call"]
        namespace = call.get("namespace", NAMESPACE)
        tool = FunctionCall(call["tool"], dict(call["arguments"]), namespace=namespace)
        return calls(tool, usage=OWNER_USAGE)

    def after_tool(self, step: dict[str, Any], done: Item) -> Reply:
        """The step's `then` filled from the tool's output; its `on_failure` when
        the tool failed (the output cannot fill `then`, or a spawn's names no
        child); with no `on_failure`, a stop that says so."""
        call = step["host_call"]
        values = values_of(done.output)
        named = step["action"] != "spawn" or bool(set(values) & SPAWNED)
        then = fill(call["then"], values) if named else None
        if then is not None:
            return exec_call(then)
        if "on_failure" not in call:
            return self.say(f"{NO_FAILURE_COMMAND}: {done.output}")
        failed = fill(call["on_failure"], values)
        if failed is None:
            return self.say(f"cannot fill {call['on_failure']} from: {done.output}")
        return exec_call(failed)

    def say(self, words: str) -> Reply:
        return text(words, usage=OWNER_USAGE)
