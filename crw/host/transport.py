"""The app-server's wire behind one small interface (`Transport`), and its JSON
lines framing.

- JSON lines over a byte stream (here): a private `codex app-server` child's
  stdio, or an in-memory stream in tests (the simulated host on the same Trio
  clock);
- WebSocket text frames (`crw.host.websocket`): a shared app-server on a unix
  socket or loopback TCP.

Messages are JSON objects with no `"jsonrpc"` member (host-protocol.md, Wire). Both
sides of a connection use the same classes: the client and the simulated host.
This module owns what both framings share: the encoder, the ordered send under a
lock, decoding and the notifications dropped unread. Foreign errors (closed
streams, broken sockets, malformed JSON) are mapped here, once, to
`HostUnavailable`. It never knows a JSON-RPC method's meaning: routing replies and
notifications is `crw.host.rpc`'s.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import trio

from crw.host.compact import compact_encoder
from crw.host.errors import HostError as HostError
from crw.host.errors import HostUnavailable as HostUnavailable
from crw.host.frames import notification_method
from crw.text import json_loads, replace_surrogates

MAX_LINE = 64 * 1024 * 1024
"""A line longer than this is a broken peer, not a message (thread/read of a long
thread is large, but not this large)."""


class Transport(Protocol):
    """One connection that moves whole JSON objects."""

    ignore: frozenset[str]
    """Notification methods `receive` drops unread: a client sets the ones nobody
    it serves wants, and they are never decoded (codex sends every client each
    subagent's chatter, wanted or not; host-protocol.md, Notifications)."""

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


_ENCODE = compact_encoder(ensure_ascii=False)
"""One encoder for every message: `json.dumps` with options makes a new one a call,
and `JSONEncoder.encode` a new C encoder a call (`crw.host.compact`)."""


def encode(message: dict[str, Any]) -> str:
    """The message as JSON text. A lone surrogate (an earlier answer's `\\ud800`
    filled into a turn's text) goes out as U+FFFD: the host takes only Unicode."""
    return replace_surrogates(_ENCODE(message))


async def send_under(
    lock: trio.Lock, stream: trio.abc.Stream, name: str, framed: Callable[[], bytes]
) -> None:
    """Write what `framed` makes to `stream`, under the send `lock`: frames go out in
    the order they were made, so none follows a close frame. A connection that is
    closed is HostUnavailable (`framed` raises it for a frame the connection can no
    longer take).

    When nobody holds the lock, the frame is made and written with no schedule
    point (a yield resumes the sender's whole await chain, and its next wait makes
    one), so no other sender can come between; if the socket takes it all at
    once, as it nearly always does, the lock is never taken (a parking-lot breaker
    registered and removed: three sends a call in the run, five in the host). A
    cancelled task writes nothing."""
    data, sent = b"", -1
    if not lock.locked():
        await trio.lowlevel.checkpoint_if_cancelled()
        data = framed()
        sent = _write_now(stream, data)
        if sent == len(data):
            return
        lock.acquire_nowait()  # the rest, in turn with the senders that come now
    else:
        await lock.acquire()
    try:
        if sent < 0:
            data = framed()
            sent = _write_now(stream, data)
        if sent < len(data):
            try:
                await stream.send_all(memoryview(data)[sent:] if sent else data)
            except (trio.BrokenResourceError, trio.ClosedResourceError) as err:
                raise HostUnavailable(f"the connection to {name} is closed") from err
    finally:
        lock.release()


def _write_now(stream: trio.abc.Stream, data: bytes) -> int:
    """The bytes of `data` a socket stream's socket takes at once (0: none, or
    `stream` is no socket stream). `send_all` tries the same write, then yields
    to the scheduler besides (a task switch a message: three a call of an App
    Server run, five replies and notifications of the host's); the sender's own
    next wait yields anyway. A socket that fails (closed, the peer gone) takes
    nothing here: `send_all` then meets the failure and says what it is."""
    if type(stream) is not trio.SocketStream or not data:
        return 0
    try:
        return os.write(stream.socket.fileno(), data)
    except OSError:  # EAGAIN, EPIPE, EBADF (closed): as send_all will find it
        return 0


def _decode(text: str | bytes | bytearray, where: str) -> dict[str, Any]:
    try:
        value = json_loads(text)
    except ValueError as err:
        raise HostUnavailable(f"{where} sent a message that is not JSON: {err}") from err
    if not isinstance(value, dict):
        raise HostUnavailable(f"{where} sent a message that is not a JSON object")
    return value


class Reading:
    """What both framings share on the receiving side: the methods to drop unread,
    and counts of what was decoded and what was dropped (tests pin the cost with
    them)."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._ignore: frozenset[str] = frozenset()
        self._ignored: frozenset[bytes] = frozenset()
        self.decoded = 0
        """Messages decoded from JSON."""
        self.skipped = 0
        """Notifications dropped unread (their method was ignored)."""

    @property
    def ignore(self) -> frozenset[str]:
        return self._ignore

    @ignore.setter
    def ignore(self, methods: frozenset[str]) -> None:
        self._ignore = methods
        self._ignored = frozenset(method.encode() for method in methods)

    def _skips(self, buffer: bytes | bytearray, start: int, end: int) -> bool:
        """Whether the message in `buffer[start:end]` is a notification to drop."""
        if not self._ignored:
            return False
        method = notification_method(buffer, start, end)
        if method is None or method not in self._ignored:
            return False
        self.skipped += 1
        return True

    def _decode(self, data: str | bytes | bytearray) -> dict[str, Any]:
        self.decoded += 1
        return _decode(data, self._name)


class JsonLinesTransport(Reading):
    """One JSON object a line over a Trio byte stream."""

    def __init__(self, stream: trio.abc.Stream, *, name: str = "the host") -> None:
        super().__init__(name)
        self._stream = stream
        self._buffer = bytearray()
        self._send_lock = trio.Lock()

    async def send(self, message: dict[str, Any]) -> None:
        await self.send_encoded((encode(message),))

    async def send_encoded(self, texts: Sequence[str]) -> None:
        data = "".join(text + "\n" for text in texts).encode()
        await send_under(self._send_lock, self._stream, self._name, lambda: data)

    async def receive(self) -> dict[str, Any]:
        while True:
            newline = self._buffer.find(b"\n")
            if newline >= 0:
                skip = self._skips(self._buffer, 0, newline)
                line = b"" if skip else bytes(self._buffer[:newline])
                del self._buffer[: newline + 1]
                if line.strip():
                    return self._decode(line)
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
