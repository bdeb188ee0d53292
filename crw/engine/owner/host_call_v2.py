"""A step's host call on codex's multi-agent v2 (the `collaboration` tools).

The v1 form is `crw.engine.owner.next_view.tool_call`. On v2 (docs/host.md,
"Multi-agent v2"): a spawn is `spawn_agent` with the step's task name
(`crw.engine.steps.task_name`) and `fork_turns: "none"`, with no agent type (v2
asks for none); a repair or continuation is `followup_task` (it starts a turn;
`send_message` does not); a close is `interrupt_agent` (v2 has no close_agent);
`wait_agent` takes no targets. The message is the step's, unchanged.
"""

from __future__ import annotations

from typing import Any

from crw.engine.steps.step_file import CloseStep, StepFile
from crw.engine.steps.task_name import task_name

NAMESPACE = "collaboration"
WAIT_MIN_MS = 10_000
"""wait_agent's least timeout_ms (its schema: default 30000, min 10000)."""


def tool_call_v2(step: StepFile, run: str) -> dict[str, Any]:
    """The step's `tool`, `namespace` and `arguments` on v2, for the step of `run`."""
    if step.action == "send_input":
        if step.agent_id is None:
            raise ValueError(f"the send_input step {step.marker} names no subagent")
        arguments: dict[str, Any] = {"target": step.agent_id, "message": step.message}
        return {"tool": "followup_task", "namespace": NAMESPACE, "arguments": arguments}
    arguments = {"task_name": task_name(run, step.marker), "message": step.message}
    if step.model is not None:
        arguments["model"] = step.model
    if step.reasoning_effort is not None:
        arguments["reasoning_effort"] = step.reasoning_effort
    arguments["fork_turns"] = "none"
    return {"tool": "spawn_agent", "namespace": NAMESPACE, "arguments": arguments}


def close_call_v2(close: CloseStep) -> dict[str, Any]:
    """A close step's host call on v2: stop the subagent's turn, if any."""
    return {
        "tool": "interrupt_agent",
        "namespace": NAMESPACE,
        "arguments": {"target": close.agent_id},
    }


def wait_call_v2(timeout_ms: int) -> dict[str, Any]:
    """wait_agent on v2: any child's update, no targets; at least WAIT_MIN_MS."""
    arguments = {"timeout_ms": max(timeout_ms, WAIT_MIN_MS)}
    return {"tool": "wait_agent", "namespace": NAMESPACE, "arguments": arguments}
