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
import os
from collections import OrderedDict
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

MAX_OPEN = 64
"""The most rollouts kept open for appending at once (a host runs many threads;
a thread's turn appends five records or more)."""

_OPEN: OrderedDict[Path, tuple[int, int, int]] = OrderedDict()
"""The rollouts open for appending, least recently appended first: each one's
descriptor, and the device and inode it was opened on."""


def append(path: Path, kind: str, payload: dict[str, Any], wall: float) -> None:
    """Add one record; its ordinal is the number of records before it (counted
    again only when the file's size is not the one this host left)."""
    try:
        found: os.stat_result | None = os.stat(path)
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        found = None
    size = found.st_size if found is not None else -1
    known = _COUNTED.get(path)
    if known is not None and known[0] == size:
        ordinal = known[1]
    elif size < 0:
        ordinal = 0
    else:
        with path.open() as lines:
            ordinal = sum(1 for _ in lines)
    at = _utc(wall)
    stamp = at.strftime("%Y-%m-%dT%H:%M:%S.") + f"{at.microsecond // 1000:03d}Z"
    line = {"timestamp": stamp, "ordinal": ordinal, "type": kind, "payload": payload}
    data = (json.dumps(line, separators=(",", ":")) + "\n").encode()
    fd = _descriptor(path, found)
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    _COUNTED[path] = (max(size, 0) + len(data), ordinal + 1)


def _descriptor(path: Path, found: os.stat_result | None) -> int:
    """The descriptor `path` is open on for appending: the one kept, while the file
    at `path` is still the one it opened; else a new one, kept (closing the least
    recently used beyond MAX_OPEN)."""
    kept = _OPEN.pop(path, None)
    if kept is not None:
        if found is not None and (found.st_dev, found.st_ino) == kept[1:]:
            _OPEN[path] = kept
            return kept[0]
        os.close(kept[0])
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o666)
    opened = os.fstat(fd)
    _OPEN[path] = (fd, opened.st_dev, opened.st_ino)
    while len(_OPEN) > MAX_OPEN:
        os.close(_OPEN.popitem(last=False)[1][0])
    return fd


def close(path: Path | None = None) -> None:
    """Close the descriptor kept for `path` (None: every one); the next append
    opens it again."""
    paths = [path] if path is not None else list(_OPEN)
    for each in paths:
        kept = _OPEN.pop(each, None)
        if kept is not None:
            os.close(kept[0])


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
