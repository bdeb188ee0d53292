"""The simulated host's ids and the items it makes: a user's message, an agent's
message and the owner's spawn call, in the wire shapes codex app-server gives them
(host-protocol.md, Items). Plain data; no I/O but the system's random source.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

ID_BATCH = 64
"""Ids made from one read of the system's random source (a spawned agent takes
five: its thread, its turn, two items and the owner's spawn item)."""

_VERSION_4 = (0xF000 << 64) | (0xC000 << 48)
"""The bits of a uuid4 that are not random: its version (4) and variant (RFC 4122)."""


def _ids() -> Iterator[str]:
    """uuid4 strings (what `str(uuid.uuid4())` gives), ID_BATCH from each `os.urandom`."""
    while True:
        block = os.urandom(16 * ID_BATCH)
        for at in range(0, len(block), 16):
            number = int.from_bytes(block[at : at + 16]) & ~_VERSION_4 | (4 << 76) | (0x8000 << 48)
            h = f"{number:032x}"
            yield f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


_IDS = _ids()


def new_id() -> str:
    """A fresh thread, turn or item id (a uuid4, as the host's are)."""
    return next(_IDS)


def user_message(text: str) -> dict[str, Any]:
    """A `userMessage` item with one text input."""
    content = [{"type": "text", "text": text, "text_elements": []}]
    return {"type": "userMessage", "id": new_id(), "clientId": None, "content": content}


def agent_message(text: str, phase: str | None) -> dict[str, Any]:
    """An `agentMessage` item; `phase` None is a provider that sets none."""
    return {
        "type": "agentMessage",
        "id": new_id(),
        "text": text,
        "phase": phase,
        "memoryCitation": None,
        "delivery": None,
        "questions": None,
    }


def spawn_call(sender: str, prompt: str, model: str | None, effort: str | None) -> dict[str, Any]:
    """The owner's `collabAgentToolCall` for a spawn, as `item/started` shows it."""
    return {
        "type": "collabAgentToolCall",
        "id": new_id(),
        "tool": "spawnAgent",
        "status": "inProgress",
        "senderThreadId": sender,
        "receiverThreadIds": [],
        "prompt": prompt,
        "model": model,
        "reasoningEffort": effort,
        "agentsStates": {},
    }
