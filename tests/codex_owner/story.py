"""What an owned run's owner did, told in a few lines: for a test that fails
waiting on the run (harness.until_row), so the failure says where the owner
stood, not only where the run did.

The owner's newest request holds its whole conversation: each user message (its
first line: the start, or a wake), each command its shell ran (the verb's words
and what its JSON answer said: the state, the steps by op and action, a
dispatch's reply), each other tool call with its output, each of its final
messages, and each v2 message a child sent it (its first line). Its newest reply
comes last. No subagent's conversation is told.
"""

from __future__ import annotations

import json
from typing import Any

from crw.host.mock_replies import ModelRequest, Reply
from tests.codex_owner.policy import call_outputs, is_subagent, shell_json

WIDTH = 160
"""A told line's most characters."""


def owner_story(requests: list[ModelRequest]) -> list[str]:
    """The owner's conversation, oldest first, a line a thing (none: no request)."""
    mine = [r for r in requests if not is_subagent(r.body)]
    if not mine:
        return []
    items = mine[-1].body.get("input") or []
    outputs = call_outputs(items)
    told: list[str] = []
    for item in items:
        kind = item.get("type")
        if kind == "message":
            said = "\n".join(str(p.get("text", "")) for p in item.get("content") or [])
            if item.get("role") not in ("user", "assistant") or not said.strip():
                continue  # codex's own instructions
            if not said.startswith("<environment_context>"):
                told.append(f"{item['role']}: {said.splitlines()[0]}")
        elif kind == "function_call":
            told.append(_call(item, outputs.get(item["call_id"])))
        elif kind == "agent_message":
            parts = item.get("content") or []
            first = str(parts[0].get("text", "")).splitlines() if parts else []
            told.append(f"from {item.get('author')}: {' / '.join(first[:2])}")
    reply = mine[-1].reply
    if reply is not None:
        told.append(f"newest reply: {_reply(reply)}")
    return [line[:WIDTH] for line in told]


def _call(item: dict[str, Any], output: str | None) -> str:
    try:
        arguments = json.loads(item.get("arguments") or "{}")
    except json.JSONDecodeError:
        arguments = {}
    if item.get("name") != "exec_command":
        shown = {k: v for k, v in arguments.items() if k != "message"}
        return f"{item.get('name')}({shown}) -> {_short(output)}"
    words = str(arguments.get("cmd", "")).split()
    verb = " ".join(words[:5])
    if output is None:
        return f"$ {verb} -> (no output yet)"
    answer = shell_json(output)
    if not answer:
        return f"$ {verb} -> {_short(output.split(chr(10) + 'Output:' + chr(10), 1)[-1])}"
    facts = [f"{k}={answer[k]}" for k in ("state", "reply", "reason") if k in answer]
    if "steps" in answer:
        steps = [
            f"{s.get('op')}:{s.get('action')}{' (reported)' if s.get('reported') else ''}"
            for s in answer["steps"]
        ]
        facts.append(f"steps={steps}")
    if isinstance(answer.get("pid"), int):
        facts.append(f"pid={answer['pid']}")
    if isinstance(answer.get("resumed_pid"), int):
        facts.append(f"resumed_pid={answer['resumed_pid']}")
    return f"$ {verb} -> {' '.join(facts)}"


def _reply(reply: Reply) -> str:
    if reply.kind == "text":
        return f"said {reply.text!r}"
    if reply.calls:
        call = reply.calls[0]
        return f"calls {call.name} {str(call.arguments.get('cmd') or '')[:80]}"
    return reply.kind


def _short(output: str | None) -> str:
    return "(no output yet)" if output is None else " ".join(output.split())[:100]
