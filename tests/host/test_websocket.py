"""crw's own WebSocket transport (wsproto driven in the caller's task): the
handshake and framing against trio-websocket, an independent implementation, and
against itself; pings, closes and oversized messages; one write for many messages."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio
import trio_websocket
import wsproto
from wsproto.events import AcceptConnection, Ping, Pong, Request, TextMessage

import crw.host.transport as transport_module
import crw.host.websocket as websocket_module
from crw.host.transport import HostUnavailable, encode
from crw.host.websocket import WebSocketTransport, websocket_client, websocket_server


class CountingStream(trio.abc.Stream):
    """A stream that counts its writes."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self.writes = 0

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        self.writes += 1
        await self.stream.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.stream.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        return await self.stream.receive_some(max_bytes)

    async def aclose(self) -> None:
        await self.stream.aclose()


def socket_pair() -> tuple[trio.SocketStream, trio.SocketStream]:
    one, two = trio.socket.socketpair()
    return trio.SocketStream(one), trio.SocketStream(two)


@asynccontextmanager
async def own_pair() -> AsyncIterator[
    tuple[WebSocketTransport, WebSocketTransport, CountingStream]
]:
    """crw's client and server over a socket pair (the server's stream counted)."""
    client_stream, server_stream = socket_pair()
    counted = CountingStream(server_stream)
    async with trio.open_nursery() as nursery:
        accepted: list[WebSocketTransport] = []

        async def accept() -> None:
            accepted.append(await websocket_server(counted, name="the client"))

        nursery.start_soon(accept)
        client = await websocket_client(client_stream, "localhost", name="the sim")
    try:
        yield client, accepted[0], counted
    finally:
        await client.aclose()
        await accepted[0].aclose()


@asynccontextmanager
async def server_for_peer() -> AsyncIterator[tuple[WebSocketTransport, Any]]:
    """crw's server, and a trio-websocket client connected to it."""
    client_stream, server_stream = socket_pair()
    async with trio.open_nursery() as nursery:
        accepted: list[WebSocketTransport] = []

        async def accept() -> None:
            accepted.append(await websocket_server(server_stream, name="the peer"))

        nursery.start_soon(accept)
        peer = await trio_websocket.wrap_client_stream(nursery, client_stream, "localhost", "/")
        await trio.testing.wait_all_tasks_blocked()
        try:
            yield accepted[0], peer
        finally:
            await accepted[0].aclose()
            await client_stream.aclose()
            nursery.cancel_scope.cancel()


async def test_messages_sent_together_go_in_one_write_and_arrive_in_order() -> None:
    async with own_pair() as (client, server, counted):
        before = counted.writes
        texts = [encode({"method": "n", "params": {"i": i, "text": "é" * i}}) for i in range(5)]
        await server.send_encoded(texts)
        assert counted.writes == before + 1
        received = [await client.receive() for _ in range(5)]
    assert received == [{"method": "n", "params": {"i": i, "text": "é" * i}} for i in range(5)]


async def test_both_ways_between_crw_and_trio_websocket() -> None:
    async with server_for_peer() as (server, peer):
        await peer.send_message('{"id":1,"method":"initialize"}')
        assert await server.receive() == {"id": 1, "method": "initialize"}
        await server.send({"id": 1, "result": {"big": "x" * 200_000}})
        assert len(await peer.get_message()) > 200_000


async def test_a_ping_is_answered() -> None:
    async with server_for_peer() as (server, peer), trio.open_nursery() as nursery:

        async def read() -> None:
            with pytest.raises(HostUnavailable):
                await server.receive()

        nursery.start_soon(read)
        with trio.fail_after(5):
            await peer.ping(b"are you there")  # returns on the pong
        await peer.aclose()


async def test_a_peer_that_closes_ends_receive_naming_it() -> None:
    async with server_for_peer() as (server, peer), trio.open_nursery() as nursery:

        async def read() -> None:
            with pytest.raises(HostUnavailable, match="the peer closed the connection"):
                await server.receive()

        nursery.start_soon(read)
        await peer.aclose()  # returns when the close is answered
    assert peer.closed.code == 1000


async def test_a_lost_socket_ends_send_and_receive_naming_the_host() -> None:
    async with own_pair() as (client, server, counted):
        await counted.stream.aclose()
        with pytest.raises(HostUnavailable, match="the sim closed the connection"):
            await client.receive()
        with pytest.raises(HostUnavailable, match="the connection to the client is closed"):
            await server.send({"method": "n"})


async def test_a_message_over_the_limit_closes_the_connection(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(websocket_module, "MAX_LINE", 1000)
    async with server_for_peer() as (server, peer):
        await peer.send_message("[" + "1," * 2000 + "1]")
        with pytest.raises(HostUnavailable, match="over 1000 bytes"):
            await server.receive()
        with pytest.raises(trio_websocket.ConnectionClosed), trio.fail_after(5):
            await peer.get_message()
        assert peer.closed.code == 1009


async def test_a_refused_upgrade_is_host_unavailable() -> None:
    client_stream, server_stream = socket_pair()
    async with trio.open_nursery() as nursery:

        async def refuse() -> None:
            request = await trio_websocket.wrap_server_stream(nursery, server_stream)
            await request.reject(404)

        nursery.start_soon(refuse)
        with pytest.raises(
            HostUnavailable, match=r"the sim refused the WebSocket upgrade \(HTTP 404\)"
        ):
            await websocket_client(client_stream, "localhost", name="the sim")
        await client_stream.aclose()
        await server_stream.aclose()


async def test_a_fragmented_message_and_a_ping_between_its_fragments_are_read() -> None:
    """Fragments go to wsproto, the whole frame after them is read here: both
    messages arrive, in order, and the ping is answered."""
    client_stream, server_stream = socket_pair()
    raw = wsproto.WSConnection(wsproto.ConnectionType.CLIENT)
    async with trio.open_nursery() as nursery:
        accepted: list[WebSocketTransport] = []

        async def accept() -> None:
            accepted.append(await websocket_server(server_stream, name="the peer"))

        nursery.start_soon(accept)
        await client_stream.send_all(raw.send(Request(host="localhost", target="/")))
        raw.receive_data(await client_stream.receive_some())
        assert isinstance(next(raw.events()), AcceptConnection)
    server = accepted[0]
    data = raw.send(TextMessage(data='{"id":1,', message_finished=False))
    data += raw.send(Ping(payload=b"p"))
    data += raw.send(TextMessage(data='"method":"a"}', message_finished=True))
    data += raw.send(TextMessage(data='{"id":2,"method":"b"}'))
    await client_stream.send_all(data)
    with trio.fail_after(5):
        assert await server.receive() == {"id": 1, "method": "a"}
        assert await server.receive() == {"id": 2, "method": "b"}
        raw.receive_data(await client_stream.receive_some())
    assert [type(e) for e in raw.events()] == [Pong]
    await server.aclose()
    await client_stream.aclose()


def test_encoding_a_message_builds_no_encoder(monkeypatch: pytest.MonkeyPatch) -> None:
    """`json.dumps` with options builds a JSONEncoder a call; every message shares one."""
    built: list[object] = []
    init = json.JSONEncoder.__init__

    def counting(self: json.JSONEncoder, *args: Any, **kwargs: Any) -> None:
        built.append(self)
        init(self, *args, **kwargs)

    monkeypatch.setattr(json.JSONEncoder, "__init__", counting)
    assert [encode({"method": "n", "params": {"i": i}}) for i in range(3)][2] == (
        '{"method":"n","params":{"i":2}}'
    )
    assert built == []


class _Steps(trio.abc.Instrument):
    """Counts the times `task` is resumed: its schedule points."""

    def __init__(self, task: trio.lowlevel.Task) -> None:
        self.task = task
        self.steps = 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        if task is self.task:
            self.steps += 1


class _GatedStream(CountingStream):
    """A stream whose first write waits for `gate`; it records what it wrote."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        super().__init__(stream)
        self.gate = trio.Event()
        self.written: list[bytes] = []

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        if not self.written:
            self.written.append(bytes(data))
            await self.gate.wait()
        else:
            self.written.append(bytes(data))
        await super().send_all(data)


async def test_a_send_the_socket_takes_at_once_makes_no_schedule_point() -> None:
    """A send nobody else is making takes the send lock at once, and a socket that
    takes the whole frame at once is written without a yield (the sender's next
    wait makes one: a yield resumes the sender's whole await chain, three a call
    of an App Server run, on either framing); a stream that is not a socket's is
    written with its `send_all`, its one schedule point."""
    one, two = socket_pair()
    lines = transport_module.JsonLinesTransport(one)
    steps = _Steps(trio.lowlevel.current_task())
    async with own_pair() as (client, server, _):
        for sender, yields in ((lines, 0), (client, 0), (server, 1)):
            trio.lowlevel.add_instrument(steps)
            try:
                await sender.send({"method": "n"})
            finally:
                trio.lowlevel.remove_instrument(steps)
            assert steps.steps == yields, sender
            steps.steps = 0
        assert await client.receive() == {"method": "n"}
        assert await server.receive() == {"method": "n"}
    await lines.aclose()
    assert await transport_module.JsonLinesTransport(two).receive() == {"method": "n"}
    await two.aclose()


async def test_a_message_larger_than_the_socket_takes_at_once_arrives_whole() -> None:
    """What the socket does not take at once is sent after it, before the next
    message."""
    one, two = socket_pair()
    sender = transport_module.JsonLinesTransport(one)
    receiver = transport_module.JsonLinesTransport(two)
    big = {"method": "n", "params": {"text": "x" * (4 << 20)}}
    got: list[dict[str, Any]] = []

    async def read() -> None:
        got.extend([await receiver.receive(), await receiver.receive()])

    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(read)
            await sender.send(big)
            await sender.send({"method": "after"})
    finally:
        await sender.aclose()
        await receiver.aclose()
    assert got == [big, {"method": "after"}]


async def test_a_send_on_a_socket_closed_here_or_by_its_peer_is_host_unavailable() -> None:
    one, two = socket_pair()
    three, four = socket_pair()
    try:
        closed_here = transport_module.JsonLinesTransport(one, name="the sim")
        await one.aclose()
        with pytest.raises(HostUnavailable, match="the connection to the sim is closed"):
            await closed_here.send({"method": "n"})
        await four.aclose()
        peer_gone = transport_module.JsonLinesTransport(three, name="the sim")
        with pytest.raises(HostUnavailable, match="the connection to the sim is closed"):
            await peer_gone.send({"method": "n"})
    finally:
        for stream in (one, two, three, four):
            await stream.aclose()


async def test_a_send_waits_for_the_send_under_way_and_a_cancelled_one_sends_nothing() -> None:
    """Frames go out in the order their sends took the lock, one write after the
    other; a send cancelled before it starts takes no lock and writes nothing."""
    one, two = socket_pair()
    gated = _GatedStream(one)
    lines = transport_module.JsonLinesTransport(gated)
    with trio.CancelScope() as scope:
        scope.cancel()
        await lines.send({"method": "never"})
    assert gated.written == []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(lines.send, {"method": "first"})
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(lines.send, {"method": "second"})
        await trio.testing.wait_all_tasks_blocked()
        assert len(gated.written) == 1
        gated.gate.set()
    assert [json.loads(w) for w in gated.written] == [{"method": "first"}, {"method": "second"}]
    await lines.aclose()
    await two.aclose()


async def test_a_send_the_socket_takes_at_once_takes_no_lock(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Made and written with no schedule point, a frame the socket takes whole
    needs no send lock (a parking-lot breaker registered and removed a send);
    the frames arrive whole and in order."""
    taken: list[object] = []
    take = trio.Lock.acquire_nowait

    def counting(lock: trio.Lock) -> None:
        taken.append(lock)
        take(lock)

    monkeypatch.setattr(trio.Lock, "acquire_nowait", counting)
    one, two = socket_pair()
    lines = transport_module.JsonLinesTransport(one)
    peer = transport_module.JsonLinesTransport(two)
    for i in range(3):
        await lines.send({"method": "n", "params": {"i": i}})
    assert taken == []
    assert [(await peer.receive())["params"]["i"] for _ in range(3)] == [0, 1, 2]
    await lines.aclose()
    await peer.aclose()


def test_encoding_a_message_builds_no_c_encoder(c_encoders_built: list[object]) -> None:
    """`JSONEncoder.encode` builds a C encoder for each message (3 us of a host
    message's 8-11); every message goes through the one `crw.host.compact` built."""
    made = c_encoders_built
    texts = [encode({"method": "n", "params": {"i": i, "s": "é"}}) for i in range(3)]
    assert texts[2] == '{"method":"n","params":{"i":2,"s":"é"}}'
    assert made == []
