"""One client's connection to the simulated host, and the loops that serve it.

`Connection` is a client's outbox of encoded messages; `serve_connection` reads
the client's requests into the host and drains the outbox to its transport (what
one host step posted goes out in one write); `connect_in_memory` and `serve_unix`
connect a client over an in-memory stream or WebSocket on a unix socket. It never
answers a request: the host behind `Served` (`crw.host.sim.server.SimHost`) does.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any, Protocol

import trio

from crw.host.transport import HostUnavailable, JsonLinesTransport, Transport, encode
from crw.host.websocket import websocket_server
from crw.private import PRIVATE_FILE

OUTBOX = 4096
"""Messages a connection may fall behind by before the host drops it (a client
that stopped reading must not stall the turns of the others)."""

BATCH = 64
"""The most messages a connection's drain writes at once."""


class Connection:
    """One client: its outbox of encoded messages, drained to its transport by its
    own task."""

    def __init__(self) -> None:
        self.outbox, self.outgoing = trio.open_memory_channel[str](OUTBOX)
        self.initialized = False
        self.opted_out: frozenset[str] = frozenset()
        """The notification methods this client asked at `initialize` not to be
        sent (`capabilities.optOutNotificationMethods`, exact names)."""

    def post(self, message: dict[str, Any]) -> None:
        self.post_encoded(encode(message))

    def post_encoded(self, text: str) -> None:
        try:
            self.outbox.send_nowait(text)
        except trio.WouldBlock:
            self.outbox.close()
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass


class Served(Protocol):
    """What serving a connection needs of the host."""

    nursery: trio.Nursery
    """Where the host runs what outlives a request (an in-memory connection's loop)."""

    def connect(self) -> Connection:
        """A new client's connection, which the host's notifications may reach."""
        ...

    def receive(self, conn: Connection, message: dict[str, Any]) -> None:
        """Answer one message of the client, without a checkpoint."""
        ...

    def disconnect(self, conn: Connection) -> None:
        """The client is gone: nothing more is posted to it."""
        ...


def _queued(first: str, outgoing: trio.MemoryReceiveChannel[str]) -> list[str]:
    """`first` and the messages queued behind it (up to BATCH), in order: what one
    host step posted (a turn's start brings five or more) goes out in one write,
    and the client reads it in one go."""
    texts = [first]
    while len(texts) < BATCH:
        try:
            texts.append(outgoing.receive_nowait())
        except (trio.WouldBlock, trio.EndOfChannel):
            break
    return texts


async def serve_connection(host: Served, transport: Transport) -> None:
    """Serve one client until it goes away; then close its transport. The turns it
    started go on in the host's nursery."""
    conn = host.connect()

    async def drain(cancel: trio.CancelScope) -> None:
        async with conn.outgoing:
            async for text in conn.outgoing:
                try:
                    await transport.send_encoded(_queued(text, conn.outgoing))
                except HostUnavailable:
                    break
        cancel.cancel()

    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(drain, nursery.cancel_scope)
            while True:
                try:
                    message = await transport.receive()
                except HostUnavailable:
                    break
                host.receive(conn, message)
            nursery.cancel_scope.cancel()
    finally:
        host.disconnect(conn)
        with trio.move_on_after(1, shield=True):
            await transport.aclose()


async def connect_in_memory(host: Served) -> Transport:
    """A client transport to `host` over an in-memory stream (JSON lines), served
    in the host's nursery: the same Trio clock drives both sides."""
    import trio.testing  # tests only: it imports pytest, which a serving host never needs

    client, server = trio.testing.memory_stream_pair()
    host.nursery.start_soon(serve_connection, host, JsonLinesTransport(server, name="a client"))
    await trio.lowlevel.checkpoint()
    return JsonLinesTransport(client, name="the simulated host")


async def serve_unix(
    host: Served, path: Path, *, task_status: trio.TaskStatus[Path] = trio.TASK_STATUS_IGNORED
) -> None:
    """Serve `host` as WebSocket over a unix socket at `path`, like a shared
    app-server (`trio.serve_listeners`, each connection upgraded by
    `websocket_server`). Reports `path` once listening; removes the socket file when
    it stops."""
    sock = trio.socket.socket(trio.socket.AF_UNIX, trio.socket.SOCK_STREAM)
    try:
        await sock.bind(str(path))
        os.chmod(path, PRIVATE_FILE)  # before it listens: nobody else connects meanwhile
        sock.listen(64)
    except BaseException:
        sock.close()
        raise

    async def handle(stream: trio.SocketStream) -> None:
        try:
            transport = await websocket_server(stream, name="a client")
        except HostUnavailable:
            await stream.aclose()
            return
        await serve_connection(host, transport)

    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(trio.serve_listeners, handle, [trio.SocketListener(sock)])
            task_status.started(path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
