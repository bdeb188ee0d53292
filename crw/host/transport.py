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

import json
from typing import Any, Protocol

import trio
from trio_websocket import ConnectionClosed, WebSocketConnection

from crw.errors import CrwError
from crw.text import replace_surrogates

MAX_LINE = 64 * 1024 * 1024
"""A line longer than this is a broken peer, not a message (thread/read of a long
thread is large, but not this large)."""


class HostError(CrwError):
    """Something went wrong talking to the host."""


class HostUnavailable(HostError):
    """The host cannot be reached, or the connection to it is gone."""


class Transport(Protocol):
    """One connection that moves whole JSON objects."""

    async def send(self, message: dict[str, Any]) -> None: ...

    async def receive(self) -> dict[str, Any]:
        """The next message. Raises HostUnavailable when the peer is gone."""
        ...

    async def aclose(self) -> None: ...


def _encode(message: dict[str, Any]) -> str:
    """The message as JSON text. A lone surrogate (an earlier answer's `\\ud800`
    filled into a turn's text) goes out as U+FFFD: the host takes only Unicode."""
    text = json.dumps(message, ensure_ascii=False, separators=(",", ":"))
    return replace_surrogates(text)


def _decode(text: str | bytes, where: str) -> dict[str, Any]:
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
        data = (_encode(message) + "\n").encode()
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
    """One JSON object a WebSocket text frame."""

    def __init__(self, ws: WebSocketConnection, *, name: str = "the host") -> None:
        self._ws = ws
        self._name = name

    async def send(self, message: dict[str, Any]) -> None:
        try:
            await self._ws.send_message(_encode(message))
        except ConnectionClosed as err:
            raise HostUnavailable(f"the connection to {self._name} is closed") from err

    async def receive(self) -> dict[str, Any]:
        try:
            return _decode(await self._ws.get_message(), self._name)
        except ConnectionClosed as err:
            raise HostUnavailable(f"{self._name} closed the connection") from err

    async def aclose(self) -> None:
        await self._ws.aclose()
