"""The simulated host answers like the real `codex app-server` 0.163.0, where crw looks.

One short conversation runs on both hosts through crw's own client: initialize,
thread/start (a cwd and a leaf TMPDIR config key), turn/start with a packet-like
text whose output contract names a schema, the wait for turn/completed, then
thread/read includeTurns. Each test compares, field by field, what crw's client
reads of the answers (`view`, `error_form`) or the notifications about the
thread (`shapes`). The real host runs offline against the mock model; the
simulated one in-process, its turns scripted to take no time. A difference fails
with the fields that differ, the real value first.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import trio

from crw.host.client import HostClient, open_client
from crw.host.connect import connect_host
from crw.host.errors import HostRequestError
from crw.host.mock_model import MockModel
from crw.host.mock_replies import fail
from crw.host.protocol import Notification
from crw.host.sim.connection import connect_in_memory
from crw.host.sim.server import open_sim_host
from crw.host.transport import JsonLinesTransport
from crw.host.uri import parse_host_uri
from crw.host.websocket import WebSocketTransport
from tests.host.codex_env import WAIT, codex_env

pytestmark = pytest.mark.codex

SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["files"],
    "properties": {"files": {"type": "array", "items": {"type": "string"}}},
}
TMPDIR_KEY = "shell_environment_policy.set.TMPDIR"

USED = frozenset(
    {
        "thread/started",
        "thread/status/changed",
        "turn/started",
        "item/started",
        "item/completed",
        "thread/tokenUsage/updated",
        "error",
        "turn/completed",
    }
)
"""The notifications crw's client parses (crw.host.protocol.NOTIFICATION_PARAMS,
less thread/closed, which neither host sends here). The real host's others
(account/rateLimits/updated, thread/readState/changed, deprecationNotice, ...)
are not compared."""


def packet_text(marker: str) -> str:
    """A turn's text by the shared conventions: marker, role, task, output contract."""
    return (
        f"crw-flow-op: {marker}\nCRW-ROLE: explorer\n\n# Task packet: cmp.1, role explorer\n\n"
        "## Task\n\nFind the files.\n\n"
        "## Output contract\n\nEnd with one JSON object that satisfies this schema.\n\n"
        f"```json\n{json.dumps(SCHEMA, indent=2)}\n```\n"
    )


@dataclass
class Host:
    """One host to hold the conversation with, and how to make its next turn fail."""

    name: str
    client: HostClient
    fail_turns: Callable[[], Awaitable[None]]
    """Make every later turn of marker cmp.1/* fail with contextWindowExceeded."""


@dataclass
class Seen:
    """What one conversation gave: the answers and notifications about its thread."""

    cwd: str
    text: str
    started: dict[str, Any]
    turn: dict[str, Any]
    read: dict[str, Any]
    shapes: list[tuple[str, ...]]


@asynccontextmanager
async def real_host(
    tmp_path: Path, home: Path, model: MockModel, follows: frozenset[str] | None = None
) -> AsyncIterator[Host]:
    uri = parse_host_uri("codex")
    async with connect_host(
        uri, env=codex_env(home), stderr=tmp_path / "codex.log", follows=follows
    ) as client:

        async def fail_turns() -> None:
            model.script("crw-flow-op: cmp.1/", fail("context_length_exceeded"))

        yield Host("codex", client, fail_turns)


@asynccontextmanager
async def sim_host(tmp_path: Path, follows: frozenset[str] | None = None) -> AsyncIterator[Host]:
    async with (
        open_sim_host(tmp_path / "sim-home") as sim,
        open_client(await connect_in_memory(sim), follows=follows) as client,
    ):
        await client.request("sim/script", {"match": {}, "behaviour": {"seconds": 0}})

        async def fail_turns() -> None:
            behaviour = {"fail": "contextWindowExceeded", "seconds": 0}
            await client.request(
                "sim/script", {"match": {"marker": "cmp.1/*"}, "behaviour": behaviour}
            )

        yield Host("sim", client, fail_turns)


@pytest.fixture
async def hosts(
    tmp_path: Path, codex_home_dir: Path, mock_model: MockModel
) -> AsyncIterator[tuple[Host, Host]]:
    """(the real host, the simulated host), each with its own directories."""
    async with (
        real_host(tmp_path, codex_home_dir, mock_model) as real,
        sim_host(tmp_path / "sim") as sim,
    ):
        yield real, sim


async def start_thread(host: Host, root: Path) -> tuple[dict[str, Any], str]:
    """thread/start with a fresh cwd and TMPDIR; the thread and the cwd given."""
    cwd, tmpdir = root / host.name / "cwd", root / host.name / "tmp"
    await trio.Path(cwd).mkdir(parents=True)
    await trio.Path(tmpdir).mkdir(parents=True)
    params = {"cwd": str(cwd), "config": {TMPDIR_KEY: str(tmpdir)}}
    thread: dict[str, Any] = (await host.client.request("thread/start", params))["thread"]
    return thread, str(cwd)


async def converse(host: Host, root: Path, marker: str = "cmp.1/t1-a1") -> Seen:
    """thread/start, turn/start, wait for turn/completed, thread/read includeTurns."""
    text = packet_text(marker)
    with host.client.notifications() as notes, trio.fail_after(WAIT):
        started, cwd = await start_thread(host, root)
        thread_id = started["id"]
        params = {
            "threadId": thread_id,
            "input": [{"type": "text", "text": text, "text_elements": []}],
        }
        turn = (await host.client.request("turn/start", params))["turn"]
        shapes: list[tuple[str, ...]] = []
        async for note in notes:
            if note.method in USED and about(note) == thread_id:
                shapes.append(shape(note))
            if note.method == "turn/completed" and note.params["turn"]["id"] == turn["id"]:
                break
        read = await host.client.request(
            "thread/read", {"threadId": thread_id, "includeTurns": True}
        )
    return Seen(cwd, text, started, turn, read["thread"], shapes)


def about(note: Notification) -> str | None:
    """The thread a notification is about."""
    thread = note.params.get("thread")
    return thread.get("id") if isinstance(thread, dict) else note.params.get("threadId")


def shape(note: Notification) -> tuple[str, ...]:
    """A notification as compared: its method, and what crw reads to tell them apart."""
    params = note.params
    if note.method == "thread/status/changed":
        return (note.method, params["status"]["type"])
    if note.method in {"item/started", "item/completed"}:
        return (note.method, params["item"]["type"])
    if note.method == "turn/completed":
        return (note.method, params["turn"]["status"])
    return (note.method,)


def error_form(error: Any) -> Any:
    """What crw reads of a turn error: codexErrorInfo, and that it has a message."""
    if error is None:
        return None
    return {
        "codexErrorInfo": error.get("codexErrorInfo"),
        "message is text": isinstance(error.get("message"), str) and bool(error["message"]),
        "additionalDetails": error.get("additionalDetails"),
    }


def item_view(item: dict[str, Any], text: str) -> dict[str, Any]:
    if item["type"] == "userMessage":
        first = next(
            (c.get("text") for c in item.get("content", []) if c.get("type") == "text"), None
        )
        return {"type": "userMessage", "first text is the turn's text": first == text}
    if item["type"] == "agentMessage":
        return {"type": "agentMessage", "phase": item.get("phase"), "text": item.get("text")}
    return {"type": item["type"]}


def thread_view(thread: dict[str, Any], seen: Seen) -> dict[str, Any]:
    """The fields of a thread crw's client uses, made comparable across hosts."""
    path = thread.get("path")
    return {
        "id is the started thread": thread.get("id") == seen.started["id"],
        "parentThreadId": thread.get("parentThreadId"),
        "status.type": thread["status"]["type"],
        "cwd is the given cwd": thread.get("cwd") == seen.cwd,
        "model present": isinstance(thread.get("model"), str) and bool(thread["model"]),
        "path present": isinstance(path, str) and bool(path),
        "rollout file exists": isinstance(path, str) and Path(path).is_file(),
    }


def view(seen: Seen) -> dict[str, Any]:
    """Everything compared of one conversation's answers."""
    turns = seen.read.get("turns", [])
    return {
        "thread/start thread": thread_view(seen.started, seen),
        "turn/start turn.status": seen.turn.get("status"),
        "thread/read thread": thread_view(seen.read, seen),
        "thread/read turns": [
            {
                "id is the started turn": turn.get("id") == seen.turn["id"],
                "status": turn.get("status"),
                "error": error_form(turn.get("error")),
                "items": [item_view(item, seen.text) for item in turn.get("items", [])],
            }
            for turn in turns
        ],
    }


def assert_same(real: Any, sim: Any, what: str) -> None:
    """Fail naming every field where the simulated host differs from codex."""
    if real == sim:
        return
    if isinstance(real, dict) and isinstance(sim, dict):
        fields = sorted(set(real) | set(sim))
        diffs = [
            f"  {k}: codex {real.get(k)!r}, sim {sim.get(k)!r}"
            for k in fields
            if real.get(k) != sim.get(k)
        ]
    else:
        diffs = [f"  codex {real!r}\n  sim   {sim!r}"]
    pytest.fail(f"the simulated host differs from codex 0.163.0 in {what}:\n" + "\n".join(diffs))


async def test_completed_turn_reads_alike(hosts: tuple[Host, Host], tmp_path: Path) -> None:
    """spec: HARV-2"""
    real, sim = [await converse(host, tmp_path) for host in hosts]
    assert view(real)["thread/read turns"][0]["status"] == "completed"
    assert_same(view(real), view(sim), "a completed turn's answers")


async def test_failed_turn_reads_alike(hosts: tuple[Host, Host], tmp_path: Path) -> None:
    """contextWindowExceeded: thread systemError, turn failed, the error's string form.
    spec: HARV-11, HARV-13"""
    for host in hosts:
        await host.fail_turns()
    real, sim = [await converse(host, tmp_path) for host in hosts]
    assert view(real)["thread/read thread"]["status.type"] == "systemError"
    assert_same(view(real), view(sim), "a failed turn's answers")


async def test_completed_turn_notifies_in_the_same_order(
    hosts: tuple[Host, Host], tmp_path: Path
) -> None:
    real, sim = [await converse(host, tmp_path) for host in hosts]
    assert real.shapes[-1] == ("turn/completed", "completed")
    assert_same(real.shapes, sim.shapes, "the notifications of a completed turn")


async def test_failed_turn_notifies_in_the_same_order(
    hosts: tuple[Host, Host], tmp_path: Path
) -> None:
    for host in hosts:
        await host.fail_turns()
    real, sim = [await converse(host, tmp_path) for host in hosts]
    assert real.shapes[-1] == ("turn/completed", "failed")
    assert_same(real.shapes, sim.shapes, "the notifications of a failed turn")


async def test_thread_read_before_the_first_turn_answers_alike(
    hosts: tuple[Host, Host], tmp_path: Path
) -> None:
    """A thread/read includeTurns of a thread that has had no turn yet: codex's
    rollout holds no turn to list, and it answers an error."""
    answers = []
    for host in hosts:
        thread, _ = await start_thread(host, tmp_path)
        try:
            read = await host.client.request(
                "thread/read", {"threadId": thread["id"], "includeTurns": True}
            )
            answers.append({"turns": read["thread"]["turns"]})
        except HostRequestError as err:
            answers.append({"error": {"code": err.code, "message": err.message}})
    assert_same(answers[0], answers[1], "thread/read includeTurns before the first turn")


@pytest.mark.parametrize("which", ["codex", "sim"])
async def test_a_client_that_follows_only_turn_completed_is_sent_none_of_the_others(
    tmp_path: Path, codex_home_dir: Path, mock_model: MockModel, which: str
) -> None:
    """codex 0.163.0 honours `capabilities.optOutNotificationMethods` (with
    `experimentalApi` false, as crw's client sends it), and so does the simulated
    host: a client opened with `follows` drops nothing unread, for none of the
    notifications crw knows but those comes to it."""
    follows = frozenset({"turn/completed"})
    opened = (
        real_host(tmp_path, codex_home_dir, mock_model, follows)
        if which == "codex"
        else sim_host(tmp_path / "sim", follows)
    )
    async with opened as host:
        with host.client.notifications(methods=follows) as notes, trio.fail_after(WAIT):
            started, _cwd = await start_thread(host, tmp_path)
            text = [{"type": "text", "text": packet_text("cmp.1/t1-a1"), "text_elements": []}]
            params = {"threadId": started["id"], "input": text}
            turn = (await host.client.request("turn/start", params))["turn"]
            async for note in notes:
                if note.params["turn"]["id"] == turn["id"]:
                    break
        transport = host.client._transport
        assert isinstance(transport, JsonLinesTransport | WebSocketTransport)
        assert note.params["turn"]["status"] == "completed"
        assert transport.skipped == 0
