"""The app-server's client: `HostClient`, the typed requests crw makes
(host-protocol.md, Requests the orchestrator uses), and `open_client`, which runs
its reader, initializes it, and closes its connection.

The requests, notifications and the reader under them are `crw.host.rpc`'s; this
module never reads the connection itself.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, NoReturn

import trio

import crw
from crw.host.errors import HostUnavailable
from crw.host.protocol import (
    NOTIFICATION_METHODS,
    Thread,
    ThreadIdPage,
    ThreadPage,
    Turn,
    parse_model,
)
from crw.host.rpc import RpcClient

if TYPE_CHECKING:
    from crw.host.transport import Transport

HANDSHAKE_TIMEOUT = 30.0
"""How long the host may take to answer `initialize` (a codex child starts in
~0.2 s; a cold first start on a fresh CODEX_HOME creates its state database)."""
CLOSE_TIMEOUT = 5.0
"""How long closing the connection may wait for the peer (a WebSocket close)."""


class HostClient(RpcClient):
    """The typed requests over one connection. Use `open_client` or
    `connect_host`, which run the reader (`run`) and close the connection."""

    user_agent: str | None = None
    """What the host said of itself at `initialize` (codex: `<client>/<its version> …`)."""

    async def initialize(self, client_name: str, version: str) -> dict[str, Any]:
        """Open the session: `initialize`, then the `initialized` notification.

        A client opened with `follows` opts out of the other notifications crw
        knows (`capabilities.optOutNotificationMethods`, exact method names, kept
        per connection by the host): the host neither encodes nor sends them to it."""
        capabilities: dict[str, Any] = {"experimentalApi": False}
        if self.follows is not None:
            capabilities["optOutNotificationMethods"] = sorted(NOTIFICATION_METHODS - self.follows)
        result = await self.request(
            "initialize",
            {
                "clientInfo": {"name": client_name, "title": client_name, "version": version},
                "capabilities": capabilities,
            },
        )
        agent = result.get("userAgent") if isinstance(result, dict) else None
        self.user_agent = agent if isinstance(agent, str) else None
        await self.notify("initialized")
        return result

    async def _thread(self, method: str, params: Mapping[str, Any]) -> Thread:
        result = await self.request(method, params)
        return parse_model(Thread, result.get("thread"), f"a {method} answer")

    async def thread_start(self, **params: Any) -> Thread:
        return await self._thread("thread/start", params)

    async def thread_read(self, thread_id: str, include_turns: bool = True) -> Thread:
        return await self._thread(
            "thread/read", {"threadId": thread_id, "includeTurns": include_turns}
        )

    async def thread_list(self, **params: Any) -> tuple[list[Thread], str | None]:
        """One page of `thread/list` and the cursor of the next (None: the last).
        Subagents are listed only with `sourceKinds=["subAgentThreadSpawn"]`."""
        page = parse_model(ThreadPage, await self.request("thread/list", params), "thread/list")
        return page.data, page.nextCursor

    async def thread_loaded_list(self) -> list[str]:
        """The ids of every thread loaded in the host, all pages."""
        ids: list[str] = []
        cursor: str | None = None
        while True:
            result = await self.request("thread/loaded/list", {"cursor": cursor} if cursor else {})
            page = parse_model(ThreadIdPage, result, "thread/loaded/list")
            ids += page.data
            if page.nextCursor is None or page.nextCursor == cursor:
                return ids
            cursor = page.nextCursor

    async def thread_resume(
        self,
        thread_id: str,
        *,
        exclude_turns: bool = True,
        config: Mapping[str, Any] | None = None,
        **overrides: Any,
    ) -> Thread:
        """Load the thread if need be and subscribe to its notifications; with no
        overrides it changes nothing else."""
        params: dict[str, Any] = {"threadId": thread_id, "excludeTurns": exclude_turns}
        if config is not None:
            params["config"] = dict(config)
        return await self._thread("thread/resume", params | overrides)

    async def thread_fork(
        self,
        thread_id: str,
        *,
        last_turn_id: str | None = None,
        config: Mapping[str, Any] | None = None,
        ephemeral: bool | None = None,
        **overrides: Any,
    ) -> Thread:
        """A new thread with the history of `thread_id` (through `last_turn_id`)."""
        params: dict[str, Any] = {"threadId": thread_id}
        optional = {"lastTurnId": last_turn_id, "config": config, "ephemeral": ephemeral}
        params |= {key: value for key, value in optional.items() if value is not None}
        return await self._thread("thread/fork", params | overrides)

    async def thread_unsubscribe(self, thread_id: str) -> str | None:
        """End the subscription; the host's status (`unsubscribed`, `notSubscribed`, …)."""
        status = (await self.request("thread/unsubscribe", {"threadId": thread_id})).get("status")
        return status if isinstance(status, str) else None

    async def turn_start(
        self,
        thread_id: str,
        text: str,
        *,
        model: str | None = None,
        effort: str | None = None,
        output_schema: Mapping[str, Any] | None = None,
    ) -> Turn:
        """Start a turn with one text input; the answer is the turn, inProgress."""
        params: dict[str, Any] = {
            "threadId": thread_id,
            "input": [{"type": "text", "text": text, "text_elements": []}],
        }
        optional = {"model": model, "effort": effort, "outputSchema": output_schema}
        params |= {key: value for key, value in optional.items() if value is not None}
        result = await self.request("turn/start", params)
        return parse_model(Turn, result.get("turn"), "a turn/start answer")

    async def turn_interrupt(self, thread_id: str, turn_id: str) -> None:
        """Interrupt the turn; it then completes `interrupted`."""
        await self.request("turn/interrupt", {"threadId": thread_id, "turnId": turn_id})


def _raise_alone(error: BaseException) -> NoReturn:
    """Raise `error` out of the group that held it, keeping its own context (raised
    in the `except` block, its context would become the group that contains it)."""
    context = error.__context__
    try:
        raise error
    finally:
        error.__context__ = context
        del error, context


@asynccontextmanager
async def single_error_nursery() -> AsyncIterator[trio.Nursery]:
    """A nursery whose tasks catch the errors they expect, so that the error of the
    block comes out alone: callers catch HostUnavailable, not a group of one."""
    try:
        async with trio.open_nursery() as nursery:
            yield nursery
    except BaseExceptionGroup as group:
        if len(group.exceptions) != 1:
            raise
        _raise_alone(group.exceptions[0])


@asynccontextmanager
async def open_client(
    transport: Transport,
    *,
    client_name: str = "crw",
    name: str = "the host",
    follows: frozenset[str] | None = None,
) -> AsyncIterator[HostClient]:
    """A client over `transport`, initialized; its reader runs until the block
    exits, and the transport is closed then. With `follows`, the host sends it
    only those of the notifications crw knows (`HostClient.initialize`).

    Raises:
        HostUnavailable: the host did not complete the handshake in HANDSHAKE_TIMEOUT.
        HostRequestError: the host refused `initialize`.
    """
    client = HostClient(transport, name=name, follows=follows)
    try:
        async with single_error_nursery() as nursery:
            await nursery.start(client.run)
            try:
                with trio.move_on_after(HANDSHAKE_TIMEOUT) as handshake:
                    await client.initialize(client_name, crw.__version__)
                if handshake.cancelled_caught:
                    raise HostUnavailable(
                        f"{name} did not answer initialize within {HANDSHAKE_TIMEOUT:g} s"
                    )
                yield client
            finally:
                nursery.cancel_scope.cancel()
    finally:
        with trio.move_on_after(CLOSE_TIMEOUT, shield=True):
            await transport.aclose()
