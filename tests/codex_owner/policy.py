"""The mock model's two policies for a real Codex owner thread and its subagents.

The mock sees the whole conversation in each request (docs/host-testing.md), so
each policy decides the next model response from it alone, as a model would:

- the **owner policy** reads its thread's last tool output (or the user message
  that began the turn) and makes the next tool call: the start command its first
  message names, `crw flow next RUN --json --wait N` in the shell, spawn_agent /
  send_input / close_agent (the namespaced multi_agent_v1 tools) for each step of
  next's last answer, `crw flow dispatched …` after each spawn and send_input
  (`--failed OUTPUT` when the spawn failed), and a final message once the run has
  ended, is paused or waits on a decision; a run that speaks multi-agent v2 names
  v2's tools in its steps (`host_call.tool` and `namespace`: the `collaboration`
  spawn_agent by task name, followup_task, interrupt_agent), which it calls as
  named, reporting a v2 spawn with the path its output names;
- the **subagent policy** answers a subagent's turn (its first message carries
  the step marker: a user message on v1, a v2 task on v2): a valid instance of the
  contract of the packet it names (the mock's default), or an answer that breaks
  it, or a failed response, and may hold its answer until the test lets it go, so
  the test can act while the turn runs.
"""

from __future__ import annotations

import json
import re
import shlex
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from crw.engine.steps.packet import MARKER_PREFIX
from crw.host.mock_replies import (
    NEW_TASK,
    FunctionCall,
    ModelRequest,
    Reply,
    Usage,
    calls,
    fail,
    invalid,
    text,
    unreachable,
    valid,
)

START_KEY = "crw-owner-start"
"""The owner's first message names its start command on the line after this key."""
NAMESPACE = "multi_agent_v1"
"""The namespace of a step's tool when its host_call names none (v1's steps)."""
STEP_TOOLS = frozenset(
    {"spawn_agent", "send_input", "close_agent", "followup_task", "interrupt_agent"}
)
"""The multi-agent tools a step names, v1's and v2's."""
WAIT_TOOL = "wait_agent"
WAIT_HINT = re.compile(r"wait_agent\((?:targets=(\[[^\]]*\]), )?timeout_ms=(\d+)\)")
"""The wait_agent call next's hint spells: v1's with targets, v2's without."""
DISPATCHED_TOOLS = frozenset({"spawn_agent", "send_input", "followup_task"})
"""The step tools whose call the owner reports with `crw flow dispatched`."""
PAIR_ARGUMENTS = ("model", "reasoning_effort")
HOLD_LIMIT = 120.0
"""A held answer is let go after this many seconds even when the test forgot."""
ENDED_STATES = frozenset({"ended", "paused", "waiting_decision"})
MARKER_LINE = re.compile(r"^crw-flow-op: (\S+)/t(\d+)-a(\d+)$", re.MULTILINE)


def user_texts(body: dict[str, Any]) -> Iterator[str]:
    for item in body.get("input") or []:
        if item.get("type") == "message" and item.get("role") == "user":
            yield "\n".join(part.get("text", "") for part in item.get("content") or [])


def v2_tasks(body: dict[str, Any]) -> Iterator[str]:
    """The payload of each v2 task the conversation holds (an `agent_message` whose
    first part is the NEW_TASK header, its payload the next part, plain offline)."""
    for item in body.get("input") or []:
        parts = item.get("content") if item.get("type") == "agent_message" else None
        if isinstance(parts, list) and parts and str(parts[0].get("text")).startswith(NEW_TASK):
            yield "\n".join(str(p.get("encrypted_content", "")) for p in parts[1:])


def is_subagent(body: dict[str, Any]) -> bool:
    """A subagent's conversation begins with its spawn message (the step marker): a
    user message on v1, a v2 task on v2."""
    said = [*user_texts(body), *v2_tasks(body)]
    return any(t.startswith(MARKER_PREFIX) for t in said)


def shell_json(output: str) -> dict[str, Any]:
    """The JSON object a command printed, out of exec_command's output (`Chunk ID…
    Output:\\n<stdout and stderr>`): the first line that opens one."""
    body = output.split("\nOutput:\n", 1)[-1]
    for match in re.finditer(r"^\{", body, re.MULTILINE):
        try:
            value, _ = json.JSONDecoder().raw_decode(body[match.start() :])
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict):
            return value
    return {}


def exec_call(cmd: str) -> Reply:
    arguments = {"cmd": cmd, "login": False, "yield_time_ms": 60000, "max_output_tokens": 100000}
    return calls(FunctionCall("exec_command", arguments), usage=OWNER_USAGE)


OWNER_USAGE = Usage(300, 0, 20, 0)
Said = tuple[str, dict[str, Any], str | None]
"""One thing of the owner's conversation: (kind, arguments, output)."""


@dataclass
class Conversation:
    """The owner's conversation as the tools saw it: each tool call with its output."""

    body: dict[str, Any]

    def steps(self) -> list[Said]:
        """(kind, arguments, output) per tool call, oldest first, and ("user", {},
        text) for each user message that begins a turn (no subagent notification)."""
        outputs = {
            item["call_id"]: str(item.get("output"))
            for item in self.body.get("input") or []
            if item.get("type") == "function_call_output"
        }
        found: list[Said] = []
        for item in self.body.get("input") or []:
            if item.get("type") == "function_call":
                arguments = json.loads(item.get("arguments") or "{}")
                found.append((_kind(item, arguments), arguments, outputs.get(item["call_id"])))
            elif item.get("type") == "message" and item.get("role") == "user":
                said = "\n".join(p.get("text", "") for p in item.get("content") or [])
                if not said.startswith(("<environment_context>", "<subagent_notification>")):
                    found.append(("user", {}, said))
        return found


def _kind(item: dict[str, Any], arguments: dict[str, Any]) -> str:
    if item.get("name") in STEP_TOOLS | {WAIT_TOOL}:
        return str(item["name"])
    words = shlex.split(str(arguments.get("cmd", "")))
    for verb in ("start", "next", "dispatched"):
        if verb in words[:4]:
            return verb
    return "shell"


@dataclass
class OwnerPolicy:
    """The owner thread's model. `crw` is the command prefix its shell runs,
    `wait` the `--wait` of each next; after the dispatch of an op in `rest_after`
    bound, the owner ends its turn instead of asking next again (a wake starts
    its next turn). `drop_pair`: spawn without the step's model and effort, as a
    careless model would (the spawn hook gives the spawn its role's pair)."""

    crw: str = "crw"
    wait: int = 5
    rest_after: frozenset[str] = frozenset()
    drop_pair: bool = False
    wait_agents: bool = False
    """When next answers no step to take while subagents are open, make the
    wait_agent call its hint spells (v1: on its targets; v2: none, any child),
    then ask next again, as the skill says."""

    def __call__(self, request: ModelRequest) -> Reply:
        steps = Conversation(request.body).steps()
        kind, arguments, output = steps[-1]
        run = _run_id(steps)
        if kind == "user":
            if START_KEY in (output or ""):
                return exec_call((output or "").split(START_KEY + "\n", 1)[1].splitlines()[0])
            return self.next_call(run)
        if kind in {"start", "next", "dispatched"} and not shell_json(output or ""):
            return text(f"crw printed no JSON: {output}", usage=OWNER_USAGE)
        if kind == "start":
            return self.next_call(str(shell_json(output or "").get("run")))
        if kind in DISPATCHED_TOOLS:
            return self.dispatched(run, self.pending(steps)[0], kind, arguments, output or "")
        if kind == "next":
            answer = shell_json(output or "")
            if answer.get("state") in ENDED_STATES and not answer.get("steps"):
                return text(f"run {run}: {answer.get('state')}", usage=OWNER_USAGE)
            waits = WAIT_HINT.search(str(answer.get("hint"))) if self.wait_agents else None
            if waits is not None and not self.pending(steps):
                return wait_call(*waits.groups())
        if kind == "dispatched" and self.resting(output or "", steps):
            return text(f"run {run}: waiting for its wake", usage=OWNER_USAGE)
        todo = self.pending(steps)
        return self.step_call(todo[0]) if todo else self.next_call(run)

    def next_call(self, run: str) -> Reply:
        return exec_call(f"{self.crw} flow next {run} --json --wait {self.wait}")

    def pending(self, steps: list[Said]) -> list[dict[str, Any]]:
        """The steps of next's last answer not yet taken: the step a spawn or
        send_input output belongs to is the first of them while its dispatch waits."""
        last = max(i for i, (kind, _, _) in enumerate(steps) if kind in {"next", "user"})
        answer = shell_json(steps[last][2] or "") if steps[last][0] == "next" else {}
        todo = [step for step in answer.get("steps") or [] if not step.get("reported")]
        taken = [kind for kind, _, _ in steps[last + 1 :] if kind in STEP_TOOLS]
        open_dispatch = steps[-1][0] in DISPATCHED_TOOLS
        return todo[len(taken) - 1 :] if open_dispatch else todo[len(taken) :]

    def resting(self, output: str, steps: list[Said]) -> bool:
        """The dispatch bound an op after which the owner ends its turn, and every
        op of `rest_after` was dispatched: next answers as soon as one step is
        there, so a gate's steps may come one answer each, in any order, and one
        left untaken would wake nobody (published to a busy owner, WAKE-1)."""
        reply = shell_json(output)
        op = f"{reply.get('call')}/t{reply.get('k')}"
        dispatched = {_op(str(said["cmd"])) for kind, said, _ in steps if kind == "dispatched"}
        bound = reply.get("reply") == "bound" and op in self.rest_after
        return bound and self.rest_after <= dispatched

    def step_call(self, step: dict[str, Any]) -> Reply:
        """The step's host call as it names it: its tool, in its namespace."""
        host_call = step["host_call"]
        arguments = dict(host_call["arguments"])
        if step["action"] == "spawn" and self.drop_pair:
            arguments = {k: v for k, v in arguments.items() if k not in PAIR_ARGUMENTS}
        namespace = host_call.get("namespace", NAMESPACE)
        tool = FunctionCall(host_call["tool"], arguments, namespace=namespace)
        return calls(tool, usage=OWNER_USAGE)

    def dispatched(
        self, run: str, step: dict[str, Any], kind: str, arguments: dict[str, Any], output: str
    ) -> Reply:
        agent = arguments.get("target") if kind != "spawn_agent" else _agent_id(output)
        report = f"--agent {agent}" if agent else f"--failed {shlex.quote(output)}"
        return exec_call(
            f"{self.crw} flow dispatched {run} {step['call']} {report} --k {step['k']} "
            f"--attempt {step['attempt']} --json --wait 30"
        )


def wait_call(targets: str | None, timeout_ms: str) -> Reply:
    """wait_agent as the hint spells it: v1's on its targets (the `multi_agent_v1`
    namespace), v2's with none (the owner's `collaboration` tools)."""
    arguments: dict[str, Any] = {"timeout_ms": int(timeout_ms)}
    if targets is not None:
        arguments = {"targets": json.loads(targets)} | arguments
    namespace = NAMESPACE if targets is not None else "collaboration"
    return calls(FunctionCall(WAIT_TOOL, arguments, namespace=namespace), usage=OWNER_USAGE)


def _agent_id(output: str) -> str | None:
    """The subagent a spawn's output names: v1's `agent_id`, v2's child path
    (`task_name`, `/root/<name>`); None when the spawn failed."""
    try:
        value = json.loads(output)
    except json.JSONDecodeError:
        return None
    if not isinstance(value, dict):
        return None
    found = value.get("agent_id") or value.get("task_name")
    return str(found) if found else None


def _op(dispatched: str) -> str:
    """The op a `crw flow dispatched RUN CALL … --k K …` command reports."""
    words = shlex.split(dispatched)
    return f"{words[words.index('dispatched') + 2]}/t{words[words.index('--k') + 1]}"


def _run_id(steps: list[Said]) -> str:
    for kind, _, output in reversed(steps):
        if kind == "start":
            return str(shell_json(output or "").get("run"))
    return ""


@dataclass
class SubagentPolicy:
    """The subagents' model. By marker (`<call>/t<k>-a<n>`) or op (`<call>/t<k>`):
    `broken` answer JSON the contract rejects, `failing` fail with that code,
    `held` wait for their event before answering (`arrived` is set when the
    request came). `usage` by call; every answer is valid otherwise."""

    broken: frozenset[str] = frozenset()
    failing: dict[str, str] = field(default_factory=dict)
    held: dict[str, threading.Event] = field(default_factory=dict)
    arrived: dict[str, threading.Event] = field(default_factory=dict)
    usage: dict[str, Usage] = field(default_factory=dict)
    unreachable: frozenset[str] = frozenset()
    """Their request finds the model's endpoint gone (`mock_replies.unreachable`)."""

    def hold(self, marker: str) -> None:
        self.held[marker] = threading.Event()
        self.arrived[marker] = threading.Event()

    def release(self) -> None:
        for event in self.held.values():
            event.set()

    def __call__(self, request: ModelRequest) -> Reply:
        found = MARKER_LINE.search(request.user_text)  # a v2 task's too (mock_replies)
        if found is None:
            return valid()
        call, k, attempt = found.groups()
        names = {f"{call}/t{k}-a{attempt}", f"{call}/t{k}"}
        usage = self.usage.get(call, Usage())
        for name in names & set(self.held):
            self.arrived[name].set()
            self.held[name].wait(HOLD_LIMIT)
        if names & self.unreachable:
            return unreachable()
        if names & set(self.failing):
            return fail(self.failing[min(names & set(self.failing))])
        return invalid(usage=usage) if names & self.broken else valid(usage=usage)


@dataclass
class Policies:
    """The mock model's policy: the owner's for the owner thread (an OwnerPolicy,
    or the FollowingOwner of follower.py), the subagents' for a conversation that
    begins with a step marker."""

    owner: Callable[[ModelRequest], Reply]
    subagent: SubagentPolicy

    def __call__(self, request: ModelRequest) -> Reply:
        if is_subagent(request.body):
            return self.subagent(request)
        return self.owner(request)


def call_outputs(items: list[dict[str, Any]]) -> dict[str, str]:
    """The outputs of a request's function calls, by call id."""
    return {
        item["call_id"]: str(item.get("output"))
        for item in items
        if item.get("type") == "function_call_output"
    }
