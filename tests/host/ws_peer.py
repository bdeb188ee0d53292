"""trio-websocket, an independent WebSocket implementation, as the peer of crw's
own (`crw.host.websocket.WebSocketTransport`): its handshake and framing must
meet another implementation's, not only themselves."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from trio_websocket import ConnectionClosed, WebSocketConnection

from crw.host.transport import HostUnavailable, encode


class TrioWebSocketPeer:
    """A `Transport` over a trio-websocket connection (it decodes every message)."""

    ignore: frozenset[str] = frozenset()

    def __init__(self, ws: WebSocketConnection) -> None:
        self.ws = ws

    async def send(self, message: dict[str, Any]) -> None:
        await self.send_encoded((encode(message),))

    async def send_encoded(self, texts: Sequence[str]) -> None:
        try:
            for text in texts:
                await self.ws.send_message(text)
        except ConnectionClosed as err:
            raise HostUnavailable("the connection is closed") from err

    async def receive(self) -> dict[str, Any]:
        try:
            value: dict[str, Any] = json.loads(await self.ws.get_message())
        except ConnectionClosed as err:
            raise HostUnavailable("the peer closed the connection") from err
        return value

    async def aclose(self) -> None:
        await self.ws.aclose()
