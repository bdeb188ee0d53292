"""What the host wire costs per call, in CPU of this process only (so a busy
machine moves it little): one subagent call's messages as the simulated host sends
them to a client (the spawn's answer, the turn's notifications, a thread/read's
answer), framed by a server transport into memory, then read back by a client
transport as the owner's client (no subscription) and as the run's (the methods
its HostReader follows).

Per call: messages and bytes a client connection carries; the microseconds of CPU
(`time.process_time`) the host spends framing them for one connection, and each
client spends receiving them; the messages each client decodes from JSON.

    .venv/bin/python bench/wire.py [--calls 3000]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio
import wsproto
from wsproto.events import AcceptConnection, Request

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from crw.actors.thread_watches import FOLLOWED  # noqa: E402
from crw.host.protocol import NOTIFICATION_METHODS  # noqa: E402
from crw.host.sim.server import open_sim_host  # noqa: E402
from crw.host.transport import HostUnavailable  # noqa: E402
from crw.host.websocket import WebSocketTransport  # noqa: E402

INSTANT = {"match": {}, "behaviour": {"seconds": 0}}


async def one_call() -> list[str]:
    """The encoded messages one connection of the host gets for one subagent call."""
    with tempfile.TemporaryDirectory(prefix="crw-wire-") as tmp:
        async with open_sim_host(Path(tmp)) as host:
            conn = host.connect()
            conn.initialized = True
            host.receive(conn, {"id": 1, "method": "sim/script", "params": INSTANT})
            host.receive(conn, {"id": 2, "method": "sim/startOwner", "params": {}})
            owner = next(iter(host.state.threads))
            _drain(conn.outgoing)
            spawn = {"parentThreadId": owner, "message": "crw-flow-op: c/t1-a1\nAnswer ok."}
            host.receive(conn, {"id": 3, "method": "sim/spawnAgent", "params": spawn})
            await trio.sleep(0.05)  # the instant turn runs to its end
            agent = list(host.state.threads)[1]
            read = {"threadId": agent, "includeTurns": True}
            host.receive(conn, {"id": 4, "method": "thread/read", "params": read})
            return _drain(conn.outgoing)


def _drain(outgoing: trio.MemoryReceiveChannel[str]) -> list[str]:
    texts = []
    while True:
        try:
            texts.append(outgoing.receive_nowait())
        except trio.WouldBlock:
            return texts


class Memory(trio.abc.Stream):
    """A stream that keeps what is written and serves `data` to read."""

    def __init__(self, data: bytes = b"") -> None:
        self.written = bytearray()
        self.data, self.at = data, 0

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        self.written += data

    async def wait_send_all_might_not_block(self) -> None:
        pass

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        chunk = self.data[self.at : self.at + (max_bytes or 65536)]
        self.at += len(chunk)
        if not chunk:
            raise trio.ClosedResourceError
        return chunk

    async def aclose(self) -> None:
        pass


def opened(kind: wsproto.ConnectionType) -> wsproto.WSConnection:
    """A wsproto connection of `kind` past its handshake."""
    client = wsproto.WSConnection(wsproto.ConnectionType.CLIENT)
    server = wsproto.WSConnection(wsproto.ConnectionType.SERVER)
    server.receive_data(client.send(Request(host="localhost", target="/")))
    list(server.events())
    client.receive_data(server.send(AcceptConnection()))
    list(client.events())
    return client if kind is wsproto.ConnectionType.CLIENT else server


async def measure(calls: int) -> dict[str, Any]:
    texts = await one_call()
    sink = Memory()
    server = WebSocketTransport(sink, opened(wsproto.ConnectionType.SERVER), name="a client")
    start = time.process_time()
    for _ in range(calls):
        await server.send_encoded(texts)
    framing = time.process_time() - start
    result: dict[str, Any] = {
        "messages_per_call": len(texts),
        "bytes_per_call": len(sink.written) // calls,
        "host_framing_us_per_call": round(framing * 1e6 / calls, 1),
    }
    for who, follows in (("owner", frozenset[str]()), ("run", FOLLOWED)):
        stream = Memory(bytes(sink.written))
        client = WebSocketTransport(stream, opened(wsproto.ConnectionType.CLIENT))
        client.ignore = NOTIFICATION_METHODS - follows
        start = time.process_time()
        try:
            while True:
                await client.receive()
        except HostUnavailable:
            pass
        spent = time.process_time() - start
        result[f"{who}_receive_us_per_call"] = round(spent * 1e6 / calls, 1)
        result[f"{who}_decoded_per_call"] = round(client.decoded / calls, 2)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--calls", type=int, default=3000)
    args = parser.parse_args()
    print(json.dumps(trio.run(measure, args.calls)))


if __name__ == "__main__":
    main()
