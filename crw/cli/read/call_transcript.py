"""The host's transcript of a call's turn, when the host can still give it.

`thread/read` of the turn's thread (docs/host.md: every item of its turns) on the
run's host, as run.json names it; its turn's items, each as a type and a text.
A run's own `codex` child ends with its process, and a host that is gone, slow,
or no longer knows the thread or the turn, gives one line of why instead.
`read_transcript` is the async read (a server on Trio awaits it); `transcript`
runs it for a command.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import trio

from crw.engine.views.call_detail import TranscriptItem, TranscriptView
from crw.errors import CrwError

TRANSCRIPT_TIMEOUT = 10.0
"""How long the host may take to connect and answer `thread/read`."""


def transcript(host: str | None, thread_id: str | None, turn_id: str | None) -> TranscriptView:
    """`read_transcript`, run to its end."""
    return trio.run(read_transcript, host, thread_id, turn_id)


async def read_transcript(
    host: str | None, thread_id: str | None, turn_id: str | None
) -> TranscriptView:
    """The host's items of turn `turn_id` of `thread_id`, or, in `error`, why the
    host cannot give them. Never raises for the host."""
    from crw.host.uri import parse_host_uri

    def gone(why: str) -> TranscriptView:
        return TranscriptView(thread_id, turn_id, None, (), why)

    if thread_id is None or turn_id is None:
        return gone("the call took no turn the rows name")
    if host is None or host == "codex":
        return gone("the run's host was its own codex child, which ends with its process")
    answer: dict[str, Any] | None = None
    try:
        uri = parse_host_uri(host)
        with trio.move_on_after(TRANSCRIPT_TIMEOUT):
            answer = await _thread_read(uri, thread_id)
    except (CrwError, OSError) as err:  # HostError is a CrwError
        return gone(str(err))
    if answer is None:
        return gone(f"the host {host} did not answer in {TRANSCRIPT_TIMEOUT:g} s")
    thread = answer.get("thread")
    thread = thread if isinstance(thread, dict) else {}
    turn = next((t for t in thread.get("turns") or [] if t.get("id") == turn_id), None)
    if turn is None:
        return gone(f"the host's thread {thread_id} holds no turn {turn_id} now")
    items = tuple(_item(item) for item in turn.get("items") or [] if isinstance(item, dict))
    return TranscriptView(thread_id, turn_id, turn.get("status"), items, None)


async def _thread_read(uri: Any, thread_id: str) -> dict[str, Any]:
    from crw.host.connect import connect_host

    async with connect_host(uri) as client:
        answer = await client.request("thread/read", {"threadId": thread_id, "includeTurns": True})
    return answer if isinstance(answer, dict) else {}


def _item(item: Mapping[str, Any]) -> TranscriptItem:
    """A host item as a type and its text: a message's text, a command and its
    output, or the item's other fields as JSON."""
    kind = str(item.get("type") or "?")
    text = item.get("text")
    if isinstance(text, str):
        return TranscriptItem(kind, text)
    content = item.get("content")
    if isinstance(content, list):
        parts = [c.get("text") for c in content if isinstance(c, dict)]
        return TranscriptItem(kind, "\n".join(p for p in parts if isinstance(p, str)))
    rest = {key: value for key, value in item.items() if key not in ("type", "id")}
    return TranscriptItem(kind, json.dumps(rest, ensure_ascii=False, sort_keys=True))
