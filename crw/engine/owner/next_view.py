"""The answer of `crw flow next` (spec, "The owner's commands"): a pure function of
what the command read.

`next_view(NextRead) -> NextView` takes the run's rows, its step files and close
steps, agents.max_threads, whether a process holds the run and the role store's
pairs, and answers the state, the steps with the host call each takes, the slots,
the spawn formats and a hint. It reads no file and writes nothing (CMD-NEXT-16):
the command (`crw.cli.owner.next`) reads, waits, resumes and removes handed-out close
steps.

Readings fixed here:
- a step's host call names the arguments as Codex's multi_agent_v1 tools take them
  (host-protocol.md, "The owner's tools"); an undecided model or effort is left
  out of a spawn's arguments (the spawn hook decides the spawn's pair). A run
  that speaks multi-agent v2 (its started rows' `multi_agent`) names v2's
  (`crw.engine.owner.host_call_v2`): a spawn step carries its `task_name`, and
  its report names the child's path, known before the call;
- a call's open subagent is the one its newest thread_started row bound, until the
  call ends (a terminal row), loses the attempt (session_attempt_lost) or publishes
  a spawn step (the next subagent replaces it; the old one is a close step while it
  is open);
- the spawn formats are the newest started row's pairs while its process holds
  the run (the process lock it names is held, or it names none and no process
  lock is: a process of a crw before the process lock), else the role store's
  (a resume reads the store), as they are for a run that pinned none
  (CMD-NEXT-22, -23, -35, -40).

- a run is starting (CMD-NEXT-24..26) while a launch of its process is under way
  (its start or launch lock is held), while its holder has not recorded its
  started row (the newest names a process lock not held, or names none while a
  process lock is held), and while its holder has not passed over the steps an
  earlier process left: a step file older than the holder's process lock is that
  process's, and the holder rewrites or retracts each one it goes on with
  (ATT-18..21), so its first published state is the one with none left. A
  starting run shows no step and no spawn format (CMD-NEXT-31);
- a step whose dispatch report waits in the inbox is `reported`: the run answers
  it, and the hint says to make no host call for it;
- a run that can do nothing is one waiting on a decision with no open call and no
  node the gate would admit: it is not resumed (no process would do anything).

- a run is also starting while a holder that took its process lock less than
  15 s ago has not bound the owner's line under its started row's digest
  (CMD-NEXT-33; `next_state.binding_pending`); after that its line is reported
  as it is, in a warning (CMD-NEXT-34, CMD-NEXT-36);
- the warnings (`next_warnings`) say what the owner's spawns will get that the
  answer does not show: a line not the holder's, a store that reads other pairs
  than pinned, a resumed process that repinned (CMD-NEXT-36, -37, -39);
- the hint is `next_hint`'s;
- a run no process holds and none could start for (`NextRead.launch_refused`)
  keeps its state and hands out no step file (the steps are a dead process's;
  close steps still are): its hint and a warning name what stopped the launch
  and the resume to run once it is fixed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from crw.engine.config.role_names import ROLES, default_agent_type
from crw.engine.owner.host_call_v2 import NAMESPACE, close_call_v2, tool_call_v2
from crw.engine.owner.next_hint import (
    NEXT_WAIT_S,
    WAIT_AGENT_TIMEOUT_MS,
    Slots,
    held_calls,
    hint,
    no_process,
)
from crw.engine.owner.next_state import (
    RESUMABLE_STATES,
    STARTING_WINDOW_S,
    NextRead,
    StepKey,
    can_do_nothing,
    is_starting,
    needs_ready_nodes,
    open_calls,
    should_resume,
    stale_steps,
    step_key,
)
from crw.engine.owner.next_warnings import next_warnings
from crw.engine.steps.step_file import CloseStep, StepFile
from crw.engine.steps.task_name import agent_path, task_name
from crw.journal.replay import RunState

__all__ = [
    "NEXT_WAIT_S",
    "RESUMABLE_STATES",
    "STARTING_WINDOW_S",
    "WAIT_AGENT_TIMEOUT_MS",
    "NextRead",
    "NextView",
    "StepKey",
    "can_do_nothing",
    "held_calls",
    "is_starting",
    "needs_ready_nodes",
    "next_view",
    "open_calls",
    "should_resume",
    "stale_steps",
]

_STEP_MEMBERS = (
    "call",
    "k",
    "attempt",
    "op",
    "role",
    "action",
    "agent_type",
    "model",
    "reasoning_effort",
    "message",
    "packet",
    "workspace",
    "agent_id",
)


@dataclass(frozen=True)
class NextView:
    """The answer. `steps` are JSON objects: the close steps first, then the step
    files, each with its `host_call`."""

    run: str
    state: str
    ended_status: str | None
    ended_state: Any
    steps: list[dict[str, Any]]
    slots: Slots
    spawn_formats: list[dict[str, Any]]
    hint: str
    resumed_pid: int | None = None
    held: list[dict[str, Any]] = field(default_factory=list)
    """Each held call, its reason and the commands that answer it (`held_calls`)."""
    warnings: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """The --json object: run, state, ended_status, ended_state, steps, slots,
        spawn_formats, hint, warnings, resumed_pid when next resumed the run, and
        held when the run waits on a decision."""
        payload: dict[str, Any] = {
            "run": self.run,
            "state": self.state,
            "ended_status": self.ended_status,
            "ended_state": self.ended_state,
            "steps": self.steps,
            "slots": self.slots.to_json(),
            "spawn_formats": self.spawn_formats,
            "hint": self.hint,
            "warnings": self.warnings,
        }
        if self.held:
            payload["held"] = self.held
        if self.resumed_pid is not None:
            payload["resumed_pid"] = self.resumed_pid
        return payload


def next_view(read: NextRead) -> NextView:
    """The answer to `read` (CMD-NEXT-1..15, CMD-NEXT-31)."""
    run = read.run_state
    slots = Slots(read.max_threads, open_subagents(run, read.closes))
    if is_starting(read):
        return NextView(
            run=read.run,
            state="starting",
            ended_status=None,
            ended_state=None,
            steps=[],
            slots=slots,
            spawn_formats=[],
            hint=hint(read, "starting", None, slots),
            resumed_pid=read.resumed_pid,
        )
    steps = [close_step_json(close, v2=_speaks_v2(read)) for close in read.closes]
    if no_process(read) is None:  # a dead process's steps go to no owner
        steps += [step_json(step, read) for step in read.steps]
    pairs = run.role_pairs if read.held and run.role_pairs is not None else read.store_pairs
    return NextView(
        run=read.run,
        state=run.state,
        ended_status=run.ended_status,
        ended_state=run.ended_state if run.state == "ended" else None,
        steps=steps,
        slots=slots,
        spawn_formats=spawn_formats(pairs, v2=_speaks_v2(read)),
        hint=hint(read, run.state, run.paused_why, slots),
        resumed_pid=read.resumed_pid,
        held=held_calls(read) if run.state == "waiting_decision" else [],
        warnings=next_warnings(read),
    )


def open_subagents(run: RunState, closes: Sequence[CloseStep] = ()) -> tuple[str, ...]:
    """The subagents of calls not ended (`RunState.bound`), then those of close
    steps not taken."""
    agents = [*run.bound.values(), *(close.agent_id for close in closes)]
    return tuple(dict.fromkeys(agents))


def _speaks_v2(read: NextRead) -> bool:
    return read.run_state.multi_agent == "multi_agent_v2"


def dispatched_command(read: NextRead, step: StepFile) -> str:
    """The command that reports the step's dispatch (CMD-NEXT-5, CMD-NEXT-6); on
    v2 a spawn's names the child's path, `/root/<task_name>`."""
    agent = step.agent_id if step.agent_id else "<agent_id>"
    if _speaks_v2(read) and step.action == "spawn":
        agent = agent_path(task_name(read.run, step.marker))
    return read.command(
        "dispatched", f"{step.call} --agent {agent} --k {step.k} --attempt {step.attempt}"
    )


TOOL_OUTPUT = "<tool_output>"
"""The placeholder of a spawn step's `on_failure`, inside single quotes: the owner
puts the tool's output in its place, each `'` of it written `'\\''` (docs/session.md)."""


def failed_command(read: NextRead, step: StepFile) -> str:
    """The command that reports that the host refused the step's spawn: `crw flow
    dispatched RUN CALL --k K --attempt N --failed '<tool_output>'` (the run holds
    the call spawn_failed)."""
    return read.command(
        "dispatched",
        f"{step.call} --k {step.k} --attempt {step.attempt} --failed '{TOOL_OUTPUT}'",
    )


def host_call(step: StepFile, read: NextRead) -> dict[str, Any]:
    """The tool call a step takes, with the live argument names, the command after
    it (`then`) and, for a spawn, the command after a spawn the host refused
    (`on_failure`): spawn_agent for a spawn, send_input(target, message) for a
    send_input (a send_input has no failure report: the run refuses `--failed` for
    it)."""
    tool = tool_call_v2(step, read.run) if _speaks_v2(read) else tool_call(step)
    call = tool | {"then": dispatched_command(read, step)}
    if step.action == "spawn":
        call["on_failure"] = failed_command(read, step)
    return call


def tool_call(step: StepFile) -> dict[str, Any]:
    """The step's `tool` and its `arguments`, as the owner's tool takes them."""
    if step.action == "send_input":
        return {
            "tool": "send_input",
            "arguments": {"target": step.agent_id, "message": step.message},
        }
    arguments: dict[str, Any] = {"agent_type": step.agent_type, "message": step.message}
    if step.model is not None:
        arguments["model"] = step.model
    if step.reasoning_effort is not None:
        arguments["reasoning_effort"] = step.reasoning_effort
    arguments["fork_context"] = False
    return {"tool": "spawn_agent", "arguments": arguments}


def step_json(step: StepFile, read: NextRead) -> dict[str, Any]:
    """A step file's members (CMD-NEXT-4), whether a dispatch report for it waits in
    the inbox (`reported`: the run answers it; no host call to make), and its host
    call."""
    members = step.to_json()
    named = {name: members[name] for name in _STEP_MEMBERS}
    if _speaks_v2(read) and step.action == "spawn":
        named["task_name"] = task_name(read.run, step.marker)
    return named | {
        "reported": step_key(step) in read.reported,
        "host_call": host_call(step, read),
    }


def close_step_json(close: CloseStep, *, v2: bool = False) -> dict[str, Any]:
    """A close step's members and its host call close_agent(target) (CMD-NEXT-7);
    on v2, which has no close_agent, interrupt_agent(target)."""
    if v2:
        return close.to_json() | {"host_call": close_call_v2(close)}
    return close.to_json() | {
        "host_call": {"tool": "close_agent", "arguments": {"target": close.agent_id}}
    }


def spawn_formats(
    pairs: Mapping[str, Mapping[str, str]], *, v2: bool = False
) -> list[dict[str, Any]]:
    """Each of the six roles' spawn format from its decided pair (CMD-NEXT-10). A
    role the pairs leave out has the agent type the hook pairs it with, undecided.
    On multi-agent v2 the `collaboration.spawn_agent` call, which names the step's
    task name and no agent type (`agent_type` null: v2 cannot apply one)."""
    formats = []
    for role in ROLES:
        pair = pairs.get(role) or {}
        agent_type = pair.get("agent_type") or default_agent_type(role)
        model, effort = pair.get("model"), pair.get("effort")
        parts = (
            ["task_name=<the step's task name>"] if v2 else [f"agent_type={json.dumps(agent_type)}"]
        )
        parts += ["message=<the step's message>"]
        parts += [f"model={json.dumps(model)}"] if model else []
        parts += [f"reasoning_effort={json.dumps(effort)}"] if effort else []
        call = f"{NAMESPACE}.spawn_agent" if v2 else "spawn_agent"
        fork = 'fork_turns="none"' if v2 else "fork_context=false"
        formats.append(
            {
                "role": role,
                "agent_type": None if v2 else agent_type,
                "model": model,
                "reasoning_effort": effort,
                "format": f"{call}({', '.join(parts)}, {fork})",
            }
        )
    return formats
