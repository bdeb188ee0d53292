"""A multi-agent v2 child's tasks as its rollout holds them, and whether one is the step's.

On v2 a child's task is no user message and no thread item (docs/host.md,
"Multi-agent v2"): the child's rollout file has it, a `response_item` line of
type `agent_message` whose content is the task's header and the message as the
owner sent it (`encrypted_content`), its turn the child's turn
(`internal_chat_message_metadata_passthrough.turn_id`). Offline codex writes the
message there in plain text; the real API may write ciphertext. So the bind
checks the message where it is readable, as on v1 (its marker line is the step's
and a spawn's names the step's packet), and binds by the task name alone where it
is not: no rollout, no task line for the turn, or a text with no marker line
(ciphertext has none).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from crw.engine.steps.step_match import carries, marker_of

TaskTexts = Mapping[str, str]
"""A child's tasks by the turn they started: turn id -> the message as written."""


def task_texts(text: str) -> dict[str, str]:
    """The tasks a child's rollout `text` holds, by turn (the first for a turn). A
    line that is not JSON (one the host is still writing) is passed over."""
    tasks: dict[str, str] = {}
    for line in text.splitlines():
        if "agent_message" in line and (found := _task(line)) is not None:
            tasks.setdefault(*found)
    return tasks


def _task(line: str) -> tuple[str, str] | None:
    try:
        entry = json.loads(line)
    except ValueError:
        return None
    if not isinstance(entry, dict) or entry.get("type") != "response_item":
        return None
    payload: Any = entry.get("payload")
    if not isinstance(payload, dict) or payload.get("type") != "agent_message":
        return None
    meta = payload.get("internal_chat_message_metadata_passthrough")
    turn = meta.get("turn_id") if isinstance(meta, dict) else None
    content = payload.get("content")
    if not isinstance(turn, str) or not isinstance(content, list):
        return None
    texts = [
        part.get("encrypted_content")
        for part in content
        if isinstance(part, dict) and part.get("type") == "encrypted_content"
    ]
    return (turn, texts[0]) if texts and isinstance(texts[0], str) else None


def not_the_steps(text: str | None, marker: str, run: str, packet: str | None) -> str | None:
    """What a readable task names in place of the step's (its marker line's marker,
    or that it names no packet of `run`, or not `packet` for a spawn); None when it
    is the step's or cannot be read (no text, or no marker line)."""
    named = marker_of(text)
    if named is None:
        return None
    if named != marker:
        return f"its marker line names {named}"
    if packet is not None and not carries(text, run, packet):
        return f"it names no packet of step {marker} of run {run}"
    return None
