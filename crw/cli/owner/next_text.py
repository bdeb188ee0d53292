"""`crw flow next`'s human form: the state line, each step with its host call (a
spawn's message cut to its marker line, the packet named), the commands after it
(`then`, `on_failure`), the slots, the spawn formats and the hint. `--json` never
builds it."""

from __future__ import annotations

import json
from typing import Any

from crw.engine.owner.next_view import NextView


def human(view: NextView) -> str:
    """The state line, each step with its host call, the slots, the spawn formats
    and the hint."""
    head = f"run {view.run}: {view.state}"
    if view.state == "ended":
        head += f" ({view.ended_status})"
    lines = [head]
    if not view.steps:
        lines.append("  no step")
    for step in view.steps:
        lines += _step_lines(step)
    slots = view.slots
    agents = f": {', '.join(slots.agents)}" if slots.agents else ""
    lines.append(f"  slots: {slots.open} of {slots.limit} open{agents}")
    if view.spawn_formats:
        lines.append("  spawn formats:")
        lines += [f"    {f['role']:<12} {f['format']}" for f in view.spawn_formats]
    lines.append(f"hint: {view.hint}")
    lines += [f"warning: {warning}" for warning in view.warnings]
    return "\n".join(lines)


def _step_lines(step: dict[str, Any]) -> list[str]:
    """A step's title, its host call with the message cut to its first line (the
    marker: the whole message is in the packet's step and in --json), the packet,
    and the commands after it."""
    call = step["host_call"]
    shown = dict(call["arguments"])
    message = shown.get("message")
    if isinstance(message, str) and "\n" in message:
        shown["message"] = message.partition("\n")[0] + "\n…"
    arguments = json.dumps(shown, ensure_ascii=False)
    if step["action"] == "close":
        title = f"  close {step['call']} a{step['attempt']} {step['agent_id']}"
    else:
        title = f"  step {step['op']}-a{step['attempt']} {step['action']} ({step['role']})"
    lines = [title, f"    {call['tool']} {arguments}"]
    if isinstance(message, str) and message != shown["message"]:
        lines.append(f"    message: {len(message):,} characters in all (--json has it whole)")
    if step.get("packet"):
        lines.append(f"    packet: {step['packet']}")
    if "then" in call:
        lines.append(f"    then: {call['then']}")
    if "on_failure" in call:
        lines.append(f"    on_failure: {call['on_failure']}")
    return lines
