"""The two framings of the app-server protocol, behind one small interface.

- JSON lines over a byte stream: a private `codex app-server` child's stdio, or an
  in-memory stream in tests (the simulated host on the same Trio clock);
- WebSocket text frames: a shared app-server on a unix socket or loopback TCP.

Messages are JSON objects with no `"jsonrpc"` member (host-protocol.md, Wire). Both
sides of a connection use the same classes: the client and the simulated host.
Foreign errors (closed streams, broken sockets, malformed JSON) are mapped here,
once, to `HostUnavailable`.
"""

from __future__ import annotations

import contextlib
import json
from collections import deque
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

import trio
import wsproto
import wsproto.events
from wsproto import ConnectionType
from wsproto.connection import ConnectionState
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Ping,
    RejectConnection,
    Request,
    TextMessage,
)
from wsproto.frame_protocol import CloseReason
from wsproto.utilities import LocalProtocolError, RemoteProtocolError

from crw.errors import CrwError
from crw.text import replace_surrogates

MAX_LINE = 64 * 1024 * 1024
"""A line longer than this is a broken peer, not a message (thread/read of a long
thread is large, but not this large)."""

RECEIVE_SIZE = 65536
"""The most bytes read from a socket at once."""


class HostError(CrwError):
    """Something went wrong talking to the host."""


class HostUnavailable(HostError):
    """The host cannot be reached, or the connection to it is gone."""


class Transport(Protocol):
    """One connection that moves whole JSON objects."""

    async def send(self, message: dict[str, Any]) -> None: ...

    async def send_encoded(self, texts: Sequence[str]) -> None:
        """Send messages `encode` made, in order, in one write: a host encodes a
        notification once for all its connections, and hands a connection what
        queued for it at once (the peer reads them in one go)."""
        ...

    async def receive(self) -> dict[str, Any]:
        """The next message. Raises HostUnavailable when the peer is gone."""
        ...

    async def aclose(self) -> None: ...


def encode(message: dict[str, Any]) -> str:
    """The message as JSON text. A lone surrogate (an earlier answer's `\\ud800`
    filled into a turn's text) goes out as U+FFFD: the host takes only Unicode."""
    text = json.dumps(message, ensure_ascii=False, separators=(",", ":"))
    return replace_surrogates(text)


def _decode(text: str | bytes | bytearray, where: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError as err:
        raise HostUnavailable(f"{where} sent a message that is not JSON: {err}") from err
    if not isinstance(value, dict):
        raise HostUnavailable(f"{where} sent a message that is not a JSON object")
    return value


class JsonLinesTransport:
    """One JSON object a line over a Trio byte stream."""

    def __init__(self, stream: trio.abc.Stream, *, name: str = "the host") -> None:
        self._stream = stream
        self._name = name
        self._buffer = bytearray()
        self._send_lock = trio.Lock()

    async def send(self, message: dict[str, Any]) -> None:
        await self.send_encoded((encode(message),))

    async def send_encoded(self, texts: Sequence[str]) -> None:
        data = "".join(text + "\n" for text in texts).encode()
        async with self._send_lock:
            try:
                await self._stream.send_all(data)
            except (trio.BrokenResourceError, trio.ClosedResourceError) as err:
                raise HostUnavailable(f"the connection to {self._name} is closed") from err

    async def receive(self) -> dict[str, Any]:
        while True:
            newline = self._buffer.find(b"\n")
            if newline >= 0:
                line = bytes(self._buffer[:newline])
                del self._buffer[: newline + 1]
                if line.strip():
                    return _decode(line, self._name)
                continue
            if len(self._buffer) > MAX_LINE:
                raise HostUnavailable(f"{self._name} sent a line over {MAX_LINE} bytes")
            try:
                chunk = await self._stream.receive_some(65536)
            except (trio.BrokenResourceError, trio.ClosedResourceError) as err:
                raise HostUnavailable(f"the connection to {self._name} is closed") from err
            if not chunk:
                raise HostUnavailable(f"{self._name} closed the connection")
            self._buffer += chunk

    async def aclose(self) -> None:
        await self._stream.aclose()


class WebSocketTransport:
    """One JSON object a WebSocket text frame, over a Trio byte stream whose
    upgrade is done (`websocket_client`, `websocket_server`).

    It drives wsproto (RFC 6455 framing and handshake) itself, in the task that
    calls `receive`: no reader task, channel or per-frame log between the socket
    and the message, which a busy connection pays for every notification. A ping
    is answered, a close is answered and ends the connection, a message over
    MAX_LINE bytes closes it (1009). The transport owns the stream: `aclose`
    closes it, after a close frame when the connection is still open.
    """

    def __init__(
        self,
        stream: trio.abc.Stream,
        ws: wsproto.WSConnection,
        *,
        name: str = "the host",
        events: Iterable[wsproto.events.Event] = (),
    ) -> None:
        self._stream = stream
        self._ws = ws
        self._name = name
        self._events = deque(events)
        self._parts: list[str | bytes | bytearray] = []
        self._size = 0
        self._send_lock = trio.Lock()

    async def send(self, message: dict[str, Any]) -> None:
        await self.send_encoded((encode(message),))

    async def send_encoded(self, texts: Sequence[str]) -> None:
        """Send messages `encode` made, a text frame each, in one write."""
        await self._send([TextMessage(data=text) for text in texts])

    async def _send(self, events: Sequence[wsproto.events.Event]) -> None:
        """Frame `events` and write them, under the lock: frames go out in the order
        wsproto made them, so none follows the close frame."""
        async with self._send_lock:
            try:
                data = b"".join([self._ws.send(event) for event in events])
            except LocalProtocolError as err:
                raise HostUnavailable(f"the connection to {self._name} is closed") from err
            try:
                await self._stream.send_all(data)
            except (trio.BrokenResourceError, trio.ClosedResourceError) as err:
                raise HostUnavailable(f"the connection to {self._name} is closed") from err

    async def receive(self) -> dict[str, Any]:
        while True:
            while self._events:
                event = self._events.popleft()
                if isinstance(event, (TextMessage, BytesMessage)):
                    message = self._take(event)
                    if message is None:
                        continue
                    if len(message) > MAX_LINE:
                        await self._reply(CloseConnection(code=CloseReason.MESSAGE_TOO_BIG))
                        raise HostUnavailable(f"{self._name} sent a message over {MAX_LINE} bytes")
                    return _decode(message, self._name)
                elif isinstance(event, Ping):
                    await self._reply(event.response())
                elif isinstance(event, CloseConnection):
                    await self._reply(event.response())
                    raise HostUnavailable(f"{self._name} closed the connection")
            if self._ws.state is ConnectionState.CLOSED:
                raise HostUnavailable(f"the connection to {self._name} is closed")
            try:
                data = await self._stream.receive_some(RECEIVE_SIZE)
            except (trio.BrokenResourceError, trio.ClosedResourceError) as err:
                raise HostUnavailable(f"the connection to {self._name} is closed") from err
            if not data:
                raise HostUnavailable(f"{self._name} closed the connection")
            try:
                self._ws.receive_data(bytes(data))
            except RemoteProtocolError as err:
                raise HostUnavailable(f"{self._name} broke the WebSocket protocol: {err}") from err
            self._events.extend(self._ws.events())

    def _take(self, event: TextMessage | BytesMessage) -> str | bytes | bytearray | None:
        """The whole message once `event` finishes it (or once its parts are over
        MAX_LINE, which ends the connection); None until then."""
        if event.message_finished and not self._parts:
            return event.data
        self._parts.append(event.data)
        self._size += len(event.data)
        if not event.message_finished and self._size <= MAX_LINE:
            return None
        parts, self._parts, self._size = self._parts, [], 0
        if isinstance(event, TextMessage):
            return "".join(p for p in parts if isinstance(p, str))
        return b"".join(p for p in parts if not isinstance(p, str))

    async def _reply(self, event: wsproto.events.Event) -> None:
        """Answer a ping or a close, unless the connection is gone already."""
        with contextlib.suppress(HostUnavailable):
            if self._ws.state in (ConnectionState.OPEN, ConnectionState.REMOTE_CLOSING):
                await self._send([event])

    async def aclose(self) -> None:
        """Close the connection: a close frame, then the stream."""
        try:
            if self._ws.state is ConnectionState.OPEN:
                with contextlib.suppress(HostUnavailable):
                    await self._send([CloseConnection(code=CloseReason.NORMAL_CLOSURE)])
        finally:
            await self._stream.aclose()


async def _handshake(
    stream: trio.abc.Stream, ws: wsproto.WSConnection, name: str
) -> tuple[wsproto.events.Event, list[wsproto.events.Event]]:
    """The first event of the opening handshake, and the events after it."""
    while True:
        try:
            data = await stream.receive_some(RECEIVE_SIZE)
        except (trio.BrokenResourceError, trio.ClosedResourceError) as err:
            raise HostUnavailable(f"the connection to {name} is closed") from err
        if not data:
            raise HostUnavailable(f"{name} closed the connection during the WebSocket upgrade")
        try:
            ws.receive_data(bytes(data))
        except RemoteProtocolError as err:
            if err.event_hint is not None:
                with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                    await stream.send_all(ws.send(err.event_hint))
            raise HostUnavailable(f"{name} broke the WebSocket upgrade: {err}") from err
        events = list(ws.events())
        if events:
            return events[0], events[1:]


async def websocket_client(
    stream: trio.abc.Stream, host: str, target: str = "/", *, name: str = "the host"
) -> WebSocketTransport:
    """Upgrade `stream` as a WebSocket client (`host` is the Host header). The
    caller bounds the wait (a peer that never answers never ends it).

    Raises:
        HostUnavailable: the peer refused the upgrade or closed the stream.
    """
    ws = wsproto.WSConnection(ConnectionType.CLIENT)
    try:
        await stream.send_all(ws.send(Request(host=host, target=target)))
    except (trio.BrokenResourceError, trio.ClosedResourceError) as err:
        raise HostUnavailable(f"the connection to {name} is closed") from err
    event, after = await _handshake(stream, ws, name)
    if isinstance(event, RejectConnection):
        raise HostUnavailable(f"{name} refused the WebSocket upgrade (HTTP {event.status_code})")
    if not isinstance(event, AcceptConnection):  # pragma: no cover - wsproto yields no other
        raise HostUnavailable(f"{name} answered the WebSocket upgrade with {event!r}")
    return WebSocketTransport(stream, ws, name=name, events=after)


async def websocket_server(
    stream: trio.abc.Stream, *, name: str = "a client"
) -> WebSocketTransport:
    """Accept the WebSocket upgrade a client sends on `stream` (any path).

    Raises:
        HostUnavailable: the client sent no valid upgrade before closing.
    """
    ws = wsproto.WSConnection(ConnectionType.SERVER)
    event, after = await _handshake(stream, ws, name)
    if not isinstance(event, Request):  # pragma: no cover - wsproto yields no other
        raise HostUnavailable(f"{name} sent {event!r} for a WebSocket upgrade")
    try:
        await stream.send_all(ws.send(AcceptConnection()))
    except (trio.BrokenResourceError, trio.ClosedResourceError) as err:
        raise HostUnavailable(f"the connection to {name} is closed") from err
    return WebSocketTransport(stream, ws, name=name, events=after)
