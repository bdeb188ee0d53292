"""The rollout files of the simulated host, in the real host's layout.

`$CODEX_HOME/sessions/YYYY/MM/DD/rollout-<time>-<threadId>.jsonl`, one line
`{"timestamp", "ordinal", "type", "payload"}` per record (host-protocol.md, The
rollout file). The sim writes the records crw reads: the `session_meta` first
line, the turn's start and end, its messages, and one `token_count` per model
response with the thread's running total and the response's own counts.
"""

from __future__ import annotations

import datetime as _dt
import json
from pathlib import Path
from typing import Any

from crw.host.sim.state import CLI_VERSION, MODEL_CONTEXT_WINDOW, MODEL_PROVIDER, Thread, Usage


def _utc(wall: float) -> _dt.datetime:
    return _dt.datetime.fromtimestamp(wall, _dt.UTC)


def rollout_path(codex_home: Path, thread_id: str, wall: float) -> Path:
    """Where the thread created at wall time `wall` keeps its rollout."""
    at = _utc(wall)
    name = f"rollout-{at:%Y-%m-%dT%H-%M-%S}-{thread_id}.jsonl"
    return codex_home / "sessions" / f"{at:%Y}" / f"{at:%m}" / f"{at:%d}" / name


_COUNTED: dict[Path, tuple[int, int]] = {}
"""Each rollout this host appended to: its size then, and its records."""


def append(path: Path, kind: str, payload: dict[str, Any], wall: float) -> None:
    """Add one record; its ordinal is the number of records before it (counted
    again only when the file's size is not the one this host left)."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        size = -1
    known = _COUNTED.get(path)
    if known is not None and known[0] == size:
        ordinal = known[1]
    elif size < 0:
        ordinal = 0
    else:
        with path.open() as lines:
            ordinal = sum(1 for _ in lines)
    stamp = _utc(wall).strftime("%Y-%m-%dT%H:%M:%S.") + f"{_utc(wall).microsecond // 1000:03d}Z"
    line = {"timestamp": stamp, "ordinal": ordinal, "type": kind, "payload": payload}
    data = (json.dumps(line, separators=(",", ":")) + "\n").encode()
    with path.open("ab") as out:
        out.write(data)
    _COUNTED[path] = (max(size, 0) + len(data), ordinal + 1)


def session_meta(thread: Thread) -> dict[str, Any]:
    """The first record; a subagent's names its parent, with the lower-case
    `subagent` source key the rollout uses (the wire says `subAgent`)."""
    payload: dict[str, Any] = {
        "session_id": thread.session_id,
        "id": thread.id,
        "cwd": thread.cwd,
        "originator": "crw-sim",
        "cli_version": CLI_VERSION,
        "source": "vscode",
        "model_provider": MODEL_PROVIDER,
        "forked_from_id": thread.forked_from_id,
    }
    if thread.is_subagent:
        payload["parent_thread_id"] = thread.parent_thread_id
        payload["source"] = {"subagent": {"thread_spawn": thread.spawn_source()}}
        payload["agent_role"] = thread.agent_role
        payload["agent_nickname"] = thread.agent_nickname
    return payload


def event(kind: str, **fields: Any) -> dict[str, Any]:
    """An `event_msg` payload: `task_started`, `user_message`, `agent_message`, …"""
    return {"type": kind, **fields}


def token_count(total: Usage, last: Usage) -> dict[str, Any]:
    """The `token_count` event of one model response."""
    return event(
        "token_count",
        info={
            "total_token_usage": total.rollout(),
            "last_token_usage": last.rollout(),
            "model_context_window": MODEL_CONTEXT_WINDOW,
        },
        rate_limits=None,
    )
