"""What receiving the host's notifications costs a client: those no subscription
takes are dropped unread (never decoded from JSON), and whole data frames never
go through wsproto, on a simulated host served over WebSocket as a shared
app-server is."""

from __future__ import annotations

import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio

from crw.host.client import HostClient
from crw.host.connect import connect_host
from crw.host.sim.connection import serve_unix
from crw.host.sim.server import open_sim_host
from crw.host.uri import parse_host_uri
from crw.host.websocket import WebSocketTransport

FOLLOWED = frozenset({"turn/completed"})


@asynccontextmanager
async def owner_and_run(
    owner_follows: frozenset[str] | None = None, run_follows: frozenset[str] | None = None
) -> AsyncIterator[tuple[HostClient, HostClient]]:
    """Two clients of one simulated host on a unix socket, its turns instant; each
    opened with its `follows` (None: the host sends it every notification)."""
    with tempfile.TemporaryDirectory(prefix="crw-") as tmp:
        home = Path(tmp) / "home"
        home.mkdir()
        async with open_sim_host(home) as host:
            await host.nursery.start(serve_unix, host, Path(tmp) / "host.sock")
            uri = parse_host_uri(f"unix:{Path(tmp) / 'host.sock'}")
            async with (
                connect_host(uri, follows=owner_follows) as owner,
                connect_host(uri, follows=run_follows) as run,
            ):
                await owner.request("sim/script", {"match": {}, "behaviour": {"seconds": 0}})
                yield owner, run


def wire(client: HostClient) -> WebSocketTransport:
    transport = client._transport
    assert isinstance(transport, WebSocketTransport)
    return transport


async def spawn_and_follow(owner: HostClient, run: HostClient, calls: int) -> None:
    """The owner spawns `calls` subagents one by one; the run waits for each one's
    turn/completed (subscribed to FOLLOWED only) and reads the thread."""
    parent = (await owner.request("sim/startOwner", {}))["threadId"]
    with run.notifications(methods=FOLLOWED) as notes:
        for i in range(calls):
            params = {"parentThreadId": parent, "message": f"crw-flow-op: c{i}/t1-a1\nAnswer."}
            agent = (await owner.request("sim/spawnAgent", params))["agentId"]
            async for note in notes:
                if note.params["threadId"] == agent:
                    break
            await run.thread_read(agent)


async def test_a_client_that_subscribed_to_nothing_decodes_only_its_answers() -> None:
    """An owner's client only sends requests: every notification a subagent's turn
    brings it (codex sends them unasked) is dropped before JSON decoding."""
    async with owner_and_run() as (owner, run):
        before = wire(owner).decoded
        with trio.fail_after(10):
            await spawn_and_follow(owner, run, 3)
        assert wire(owner).decoded - before == 4  # sim/startOwner and three spawns
        assert wire(owner).skipped >= 3 * 9


async def test_a_subscription_to_some_methods_decodes_only_those() -> None:
    """The run takes turn/completed: of a turn's nine notifications it decodes that
    one (and its answers), never the items, statuses and token counts."""
    async with owner_and_run() as (owner, run):
        before = wire(run).decoded
        with trio.fail_after(10):
            await spawn_and_follow(owner, run, 3)
        assert wire(run).decoded - before == 3 * 2  # each turn/completed and thread/read


async def test_clients_that_opted_out_are_sent_nothing_to_drop() -> None:
    """Opened with `follows` (the owner's client nothing, the run's FOLLOWED), the
    clients are sent no notification they would drop unread: the host spends
    nothing on them either."""
    async with owner_and_run(frozenset(), FOLLOWED) as (owner, run):
        owner_before, run_before = wire(owner).decoded, wire(run).decoded
        with trio.fail_after(10):
            await spawn_and_follow(owner, run, 3)
        assert wire(owner).decoded - owner_before == 4  # sim/startOwner and three spawns
        assert wire(run).decoded - run_before == 3 * 2  # each turn/completed and thread/read
        assert wire(owner).skipped == wire(run).skipped == 0


async def test_a_subscription_to_every_method_decodes_everything() -> None:
    async with owner_and_run() as (owner, run):
        with run.notifications() as notes, trio.fail_after(10):
            parent = (await owner.request("sim/startOwner", {}))["threadId"]
            params = {"parentThreadId": parent, "message": "crw-flow-op: c/t1-a1\nAnswer."}
            await owner.request("sim/spawnAgent", params)
            methods = [(await notes.receive()).method for _ in range(6)]
        assert "item/started" in methods
        assert wire(run).skipped == 0


async def test_whole_data_frames_never_reach_wsproto(monkeypatch: pytest.MonkeyPatch) -> None:
    """Reading and writing a message is the transport's own framing, both ways;
    wsproto sees the handshake and control frames only."""
    fed: list[bytes] = []
    framed: list[object] = []
    to_wsproto = WebSocketTransport._to_wsproto
    send = WebSocketTransport._send

    def counting_feed(self: WebSocketTransport, data: bytes) -> None:
        fed.append(data)
        to_wsproto(self, data)

    async def counting_send(self: WebSocketTransport, events: list[object]) -> None:
        framed.extend(events)
        await send(self, events)  # type: ignore[arg-type]

    monkeypatch.setattr(WebSocketTransport, "_to_wsproto", counting_feed)
    monkeypatch.setattr(WebSocketTransport, "_send", counting_send)
    async with owner_and_run() as (owner, run):
        requests = len(framed)
        with trio.fail_after(10):
            await spawn_and_follow(owner, run, 2)
        assert fed == []
        assert len(framed) == requests == 0
