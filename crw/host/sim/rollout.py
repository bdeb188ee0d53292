"""The rollout files of the simulated host, in the real host's layout.

`$CODEX_HOME/sessions/YYYY/MM/DD/rollout-<time>-<threadId>.jsonl`, one line
`{"timestamp", "ordinal", "type", "payload"}` per record (host-protocol.md, The
rollout file). The sim writes the records crw reads: the `session_meta` first
line, the turn's start and end, its messages, and one `token_count` per model
response with the thread's running total and the response's own counts.
"""

from __future__ import annotations

import datetime as _dt
import math
import os
from collections import OrderedDict
from pathlib import Path
from typing import Any

from crw.host.compact import compact_encoder
from crw.host.sim.state import CLI_VERSION, MODEL_CONTEXT_WINDOW, MODEL_PROVIDER, Thread, Usage
from crw.private import make_dirs, open_file
from crw.topdir import spread_subdirectories


def _utc(wall: float) -> _dt.datetime:
    return _dt.datetime.fromtimestamp(wall, _dt.UTC)


def rollout_path(codex_home: Path, thread_id: str, wall: float) -> Path:
    """Where the thread created at wall time `wall` keeps its rollout."""
    return Path(rollout_file(str(codex_home), thread_id, wall))


def rollout_file(codex_home: str, thread_id: str, wall: float) -> str:
    """`rollout_path` as a string, made without pathlib (a host names a file a thread)."""
    at = _utc(wall)
    home = codex_home.rstrip("/")
    day = f"{at.year:04d}/{at.month:02d}/{at.day:02d}"
    time = (
        f"{at.year:04d}-{at.month:02d}-{at.day:02d}T{at.hour:02d}-{at.minute:02d}-{at.second:02d}"
    )
    return f"{home}/sessions/{day}/rollout-{time}-{thread_id}.jsonl"


Record = tuple[str, dict[str, Any], float]
"""One rollout record: its type, its payload, and the wall time it is stamped with."""

_ENCODE = compact_encoder(ensure_ascii=True)
"""`json.dumps(..., separators=(",", ":"))` without a new encoder a call: a record
is one call (its line's four keys in their order)."""

_COUNTED: dict[str, tuple[int, int]] = {}
"""Each rollout this host appended to: its size then, and its records."""

MAX_OPEN = 64
"""The most rollouts kept open for appending at once (a host runs many threads;
a thread's turn appends five records or more)."""

_OPEN: OrderedDict[str, tuple[int, int, int]] = OrderedDict()
"""The rollouts open for appending, least recently appended first: each one's
descriptor, and the device and inode it was opened on."""

_STAMP: list[tuple[int, str]] = [(-1, "")]
"""The last second stamped (seconds since the epoch) and its formatted part."""


def append(path: str | os.PathLike[str], kind: str, payload: dict[str, Any], wall: float) -> None:
    """Add one record; its ordinal is the number of records before it (counted
    again only when the file's size is not the one this host left)."""
    append_all(path, [(kind, payload, wall)])


def append_all(path: str | os.PathLike[str], records: list[Record]) -> None:
    """Add `records` in order, in one write: one look at the file (a stat of a
    rollout kept open, an fstat of one just opened) however many they are; its
    directories are made only when opening the file finds them missing."""
    key = os.fspath(path)
    fd, size = _descriptor(key)
    known = _COUNTED.get(key)
    if known is not None and known[0] == size:
        ordinal = known[1]
    elif size == 0:
        ordinal = 0
    else:
        with Path(key).open() as lines:
            ordinal = sum(1 for _ in lines)
    lines_out = [
        _ENCODE({"timestamp": _stamp(wall), "ordinal": at, "type": kind, "payload": payload})
        for at, (kind, payload, wall) in enumerate(records, ordinal)
    ]
    lines_out.append("")
    data = "\n".join(lines_out).encode()
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    _COUNTED[key] = (size + len(data), ordinal + len(records))


def _stamp(wall: float) -> str:
    """`YYYY-MM-DDTHH:MM:SS.mmmZ` of `wall` (>= 0), as `datetime.fromtimestamp`
    rounds it (to the microsecond, half to even); the part up to the second is
    formatted once a second (strftime and the datetime were half a record's cost)."""
    fraction, whole = math.modf(wall)
    micro, second = round(fraction * 1e6), int(whole)
    if micro >= 1_000_000:
        micro, second = micro - 1_000_000, second + 1
    if _STAMP[0][0] != second:
        _STAMP[0] = (second, _utc(second).strftime("%Y-%m-%dT%H:%M:%S."))
    return f"{_STAMP[0][1]}{micro // 1000:03d}Z"


def _descriptor(key: str) -> tuple[int, int]:
    """The descriptor the file at `key` is open on for appending, and its size:
    the one kept, while the file at `key` is still the one it opened; else a new
    one, kept (closing the least recently used beyond MAX_OPEN)."""
    kept = _OPEN.pop(key, None)
    if kept is not None:
        try:
            found: os.stat_result | None = os.stat(key)
        except FileNotFoundError:
            found = None
        if found is not None and (found.st_dev, found.st_ino) == kept[1:]:
            _OPEN[key] = kept
            return kept[0], found.st_size
        os.close(kept[0])
    flags = os.O_WRONLY | os.O_APPEND
    try:
        fd = open_file(key, flags)
    except FileNotFoundError:
        make_day(os.path.dirname(key))
        fd = open_file(key, flags)
    opened = os.fstat(fd)
    _OPEN[key] = (fd, opened.st_dev, opened.st_ino)
    while len(_OPEN) > MAX_OPEN:
        os.close(_OPEN.popitem(last=False)[1][0])
    return fd, opened.st_size


def make_day(day: str) -> None:
    """Make the directory `day` and its missing parents; a directory made inside
    the sessions tree (a year in `sessions/`, a month in its year, a day in its
    month) is made in a parent that spreads its subdirectories over the file
    system's block groups (`crw.topdir`). A host makes a rollout a thread,
    a day's all in one directory, and on ext4 without a journal each create scans
    past every inode its block group freed in the last minute or more: a day put
    beside a tree just removed (a finished run's, a test's) cost every rollout's
    create ~1 ms of kernel time. Each is made 0700, as its rollouts are 0600."""
    missing = []
    directory = os.path.abspath(day)
    while not os.path.isdir(directory) and os.path.dirname(directory) != directory:
        missing.append(directory)
        directory = os.path.dirname(directory)
    for made in reversed(missing):
        parent = os.path.dirname(made)
        if os.path.basename(parent) == "sessions" or "/sessions/" in parent:
            spread_subdirectories(parent)
        make_dirs(made)  # 0700; one another thread or host made meanwhile is left


def close(path: str | os.PathLike[str] | None = None) -> None:
    """Close the descriptor kept for `path` (None: every one); the next append
    opens it again."""
    keys = [os.fspath(path)] if path is not None else list(_OPEN)
    for key in keys:
        kept = _OPEN.pop(key, None)
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


def inter_agent_task(sender: str, recipient: str, text: str, turn_id: str) -> dict[str, Any]:
    """The `response_item` of a multi-agent v2 task as a child's rollout holds it:
    an `agent_message` whose content is the task's header and its text, as sent."""
    header = f"Message Type: NEW_TASK\nTask name: {recipient}\nSender: {sender}\nPayload:\n"
    return {
        "type": "agent_message",
        "author": sender,
        "recipient": recipient,
        "content": [
            {"type": "input_text", "text": header},
            {"type": "encrypted_content", "encrypted_content": text},
        ],
        "internal_chat_message_metadata_passthrough": {"turn_id": turn_id},
    }
