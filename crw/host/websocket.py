"""The WebSocket framing of the app-server's wire: `WebSocketTransport`, and the
opening handshake of either side (`websocket_client`, `websocket_server`).

It owns RFC 6455 on a Trio byte stream: frames read and made in the caller's
task, pings and closes answered, the upgrade. What both framings share (the
encoder, the ordered send, decoding, the notifications dropped unread) is
`crw.host.transport`'s; it never knows a JSON-RPC method's meaning.
"""

from __future__ import annotations

import contextlib
import os
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

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

from crw.host.errors import HostUnavailable
from crw.host.frames import BINARY, CONTINUATION, FIN, TEXT, Head, frame, parse_head, xor_mask
from crw.host.transport import MAX_LINE, Reading, encode, send_under

RECEIVE_SIZE = 65536
"""The most bytes read from a socket at once."""


class WebSocketTransport(Reading):
    """One JSON object a WebSocket text frame, over a Trio byte stream whose
    upgrade is done (`websocket_client`, `websocket_server`).

    It reads in the task that calls `receive`: no reader task, channel or
    per-frame log between the socket and the message, which a busy connection pays
    for every notification. A whole data frame is read here (`crw.host.frames`),
    and an ignored notification is dropped from the buffer unread; control frames
    and fragmented messages go to wsproto (RFC 6455 framing and handshake), a whole
    frame at a time. Data frames are made here too: a server's unmasked, a
    client's masked with a fresh random key each (RFC 6455, section 5.3). A ping
    is answered, a close is answered and ends the connection, a message over
    MAX_LINE bytes closes it (1009). The transport owns the stream: `aclose` closes
    it, after a close frame when the connection is still open.
    """

    def __init__(
        self,
        stream: trio.abc.Stream,
        ws: wsproto.WSConnection,
        *,
        name: str = "the host",
        buffer: bytes = b"",
    ) -> None:
        super().__init__(name)
        self._stream = stream
        self._ws = ws
        self._server = not ws.client
        self._buffer = bytearray(buffer)
        self._events: deque[wsproto.events.Event] = deque()
        self._fragmented = False
        """A fragmented message is under way: every frame goes to wsproto until it ends."""
        self._parts: list[str | bytes | bytearray] = []
        self._size = 0
        self._send_lock = trio.Lock()

    async def send(self, message: dict[str, Any]) -> None:
        await self.send_encoded((encode(message),))

    async def send_encoded(self, texts: Sequence[str]) -> None:
        """Send messages `encode` made, a text frame each, in one write."""

        def framed() -> bytes:
            if self._ws.state is not ConnectionState.OPEN:  # as wsproto refuses it
                raise LocalProtocolError("the connection is closing")
            if self._server:
                return b"".join([frame(text.encode()) for text in texts])
            return b"".join([frame(text.encode(), key=os.urandom(4)) for text in texts])

        await self._write(framed)

    async def _send(self, events: Sequence[wsproto.events.Event]) -> None:
        """Frame `events` with wsproto and write them."""
        await self._write(lambda: b"".join([self._ws.send(event) for event in events]))

    async def _write(self, framed: Callable[[], bytes]) -> None:
        """Write what `framed` makes, under the lock: frames go out in the order they
        were made, so none follows the close frame. A frame the connection can no
        longer take is HostUnavailable."""

        def checked() -> bytes:
            try:
                return framed()
            except LocalProtocolError as err:
                raise HostUnavailable(f"the connection to {self._name} is closed") from err

        await send_under(self._send_lock, self._stream, self._name, checked)

    async def receive(self) -> dict[str, Any]:
        while True:
            while self._events:
                message = await self._on_event(self._events.popleft())
                if message is not None:
                    return self._decode(message)
            head = parse_head(self._buffer)
            if head is not None and head.end - head.start > MAX_LINE:
                await self._reply(CloseConnection(code=CloseReason.MESSAGE_TOO_BIG))
                raise HostUnavailable(f"{self._name} sent a message over {MAX_LINE} bytes")
            if head is not None and head.end <= len(self._buffer):
                message = self._take_frame(head)
                if message is not None:
                    return self._decode(message)
                continue
            if self._ws.state is ConnectionState.CLOSED:
                raise HostUnavailable(f"the connection to {self._name} is closed")
            try:
                data = await self._stream.receive_some(RECEIVE_SIZE)
            except (trio.BrokenResourceError, trio.ClosedResourceError) as err:
                raise HostUnavailable(f"the connection to {self._name} is closed") from err
            if not data:
                raise HostUnavailable(f"{self._name} closed the connection")
            self._buffer += data

    def _take_frame(self, head: Head) -> bytes | str | None:
        """Take the whole frame `head` off the buffer: the message it carries when
        it is one whole data frame masked as the peer's role must (a text frame
        checked UTF-8), else None (an ignored notification dropped unread, or the
        frame handed to wsproto, its events queued)."""
        buffer = self._buffer
        fast = head.whole_data and not self._fragmented and (head.mask is not None) == self._server
        if not fast:
            data = bytes(buffer[: head.end])
            del buffer[: head.end]
            if head.first & 0xF in (CONTINUATION, TEXT, BINARY):
                self._fragmented = not head.first & FIN
            self._to_wsproto(data)
            return None
        if head.mask is None and self._skips(buffer, head.start, head.end):
            del buffer[: head.end]
            return None
        payload = bytes(buffer[head.start : head.end])
        del buffer[: head.end]
        if head.mask is not None:
            payload = xor_mask(payload, head.mask)
            if self._skips(payload, 0, len(payload)):
                return None
        if head.first & 0xF == BINARY:
            return payload
        try:
            return payload.decode()
        except UnicodeDecodeError as err:
            raise HostUnavailable(f"{self._name} sent a text frame that is not UTF-8") from err

    def _to_wsproto(self, data: bytes) -> None:
        try:
            self._ws.receive_data(data)
            self._events.extend(self._ws.events())
        except RemoteProtocolError as err:
            raise HostUnavailable(f"{self._name} broke the WebSocket protocol: {err}") from err

    async def _on_event(self, event: wsproto.events.Event) -> str | bytes | bytearray | None:
        """Act on one event of wsproto: the whole message once it is complete."""
        if isinstance(event, (TextMessage, BytesMessage)):
            message = self._take(event)
            if message is not None and len(message) > MAX_LINE:
                await self._reply(CloseConnection(code=CloseReason.MESSAGE_TOO_BIG))
                raise HostUnavailable(f"{self._name} sent a message over {MAX_LINE} bytes")
            return message
        if isinstance(event, Ping):
            await self._reply(event.response())
        elif isinstance(event, CloseConnection):
            await self._reply(event.response())
            raise HostUnavailable(f"{self._name} closed the connection")
        return None

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
) -> tuple[wsproto.events.Event, bytes]:
    """The first event of the opening handshake, and the bytes read after its
    head (frames the transport reads itself, not wsproto)."""
    data = b""
    while True:
        try:
            chunk = await stream.receive_some(RECEIVE_SIZE)
        except (trio.BrokenResourceError, trio.ClosedResourceError) as err:
            raise HostUnavailable(f"the connection to {name} is closed") from err
        if not chunk:
            raise HostUnavailable(f"{name} closed the connection during the WebSocket upgrade")
        data += chunk
        end = data.find(b"\r\n\r\n")
        if end < 0 and len(data) < RECEIVE_SIZE:
            continue  # a head that never ends is wsproto's to refuse
        head, rest = (data, b"") if end < 0 else (data[: end + 4], data[end + 4 :])
        try:
            ws.receive_data(head)
        except RemoteProtocolError as err:
            if err.event_hint is not None:
                with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                    await stream.send_all(ws.send(err.event_hint))
            raise HostUnavailable(f"{name} broke the WebSocket upgrade: {err}") from err
        events = list(ws.events())
        if events:
            return events[0], rest
        data = rest


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
    return WebSocketTransport(stream, ws, name=name, buffer=after)


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
    return WebSocketTransport(stream, ws, name=name, buffer=after)
