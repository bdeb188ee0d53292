"""What the simulated host spends on the wire: a notification to many connections
is encoded once; what one request causes goes to a connection in one write."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

import crw.host.sim.broadcast as broadcast_module
from crw.host.sim.connection import serve_connection
from crw.host.sim.server import open_sim_host
from crw.host.transport import HostUnavailable, encode
from tests.host.sim.support import client_of


async def test_a_notification_to_every_connection_is_encoded_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    encoded: list[str | None] = []

    def counting(message: dict[str, Any]) -> str:
        encoded.append(message.get("method"))
        return encode(message)

    monkeypatch.setattr(broadcast_module, "encode", counting)
    async with open_sim_host(tmp_path / "home") as host:
        clients = [await client_of(host) for _ in range(3)]
        owner = (await clients[0].request("sim/startOwner", {}))["threadId"]
        for client in clients:
            started = await client.wait_for("thread/started")
            assert started["thread"]["id"] == owner
        for client in clients:
            await client.transport.aclose()
    assert encoded.count("thread/started") == 1


class Recording:
    """A connection's transport that keeps each write: the messages it carried."""

    ignore: frozenset[str] = frozenset()

    def __init__(self) -> None:
        self.incoming, self._receive = trio.open_memory_channel[dict[str, Any]](16)
        self.writes: list[list[dict[str, Any]]] = []

    async def send(self, message: dict[str, Any]) -> None:
        await self.send_encoded((encode(message),))

    async def send_encoded(self, texts: Sequence[str]) -> None:
        self.writes.append([json.loads(text) for text in texts])

    async def receive(self) -> dict[str, Any]:
        try:
            return await self._receive.receive()
        except trio.EndOfChannel:
            raise HostUnavailable("the test closed the connection") from None

    async def aclose(self) -> None:
        pass


async def _answered(conn: Recording, request_id: int) -> list[dict[str, Any]]:
    """The answer to `request_id` and what follows it in its write, once it is
    made (the host's handler may wait on a worker thread, the thread's rollout
    file, while every task is blocked; a write may begin with the answers queued
    before it)."""
    with trio.fail_after(10):
        while True:
            for write in conn.writes:
                ids = [message.get("id") for message in write]
                if request_id in ids:
                    return write[ids.index(request_id) :]
            await trio.sleep(0.005)


async def test_what_a_request_causes_goes_in_one_write(tmp_path: Path) -> None:
    """thread/start's answer and its thread/started; turn/start's answer, the status,
    the turn's start and its user message's two items: one write each."""
    conn = Recording()
    async with open_sim_host(tmp_path / "home") as host, trio.open_nursery() as nursery:
        nursery.start_soon(serve_connection, host, conn)
        await conn.incoming.send({"id": 1, "method": "initialize", "params": {}})
        await conn.incoming.send({"id": 2, "method": "sim/script", "params": {"match": {}}})
        await conn.incoming.send({"id": 3, "method": "thread/start", "params": {}})
        thread_id = (await _answered(conn, 3))[0]["result"]["thread"]["id"]
        text = [{"type": "text", "text": "go", "text_elements": []}]
        params = {"threadId": thread_id, "input": text}
        await conn.incoming.send({"id": 4, "method": "turn/start", "params": params})
        await _answered(conn, 4)
        await trio.testing.wait_all_tasks_blocked()
        conn.incoming.close()
    started = await _answered(conn, 3)
    assert [m.get("method") for m in started] == [None, "thread/started"]
    turn = await _answered(conn, 4)
    assert [m.get("method") for m in turn] == [
        None,
        "thread/status/changed",
        "turn/started",
        "item/started",
        "item/completed",
    ]
