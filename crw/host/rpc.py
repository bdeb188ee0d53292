"""The JSON-RPC plumbing of a connection to the app-server, over any `Transport`:
`RpcClient` sends requests and notifications and reads the connection.

One reader task owns the receiving side of the connection: it routes responses to
the requests waiting for them (many at once, answered in any order), fans
notifications out to subscribers (`Subscription`), and refuses the host's own
requests. Errors of the wire are mapped here, once: a JSON-RPC error to
`HostRequestError`, a lost connection to `HostUnavailable` for every pending and
later call. It never knows what a method means: the typed requests are
`crw.host.client.HostClient`'s, opening and closing a client `open_client`'s.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import trio

from crw.host.errors import HostRequestError, HostUnavailable
from crw.host.protocol import NOTIFICATION_METHODS, HostProtocolError, Notification

if TYPE_CHECKING:
    from crw.host.transport import Transport

METHOD_NOT_FOUND = -32601


class Subscription(trio.abc.ReceiveChannel[Notification]):
    """Every notification from the moment of subscribing, in order, until it ends.

    It ends (`EndOfChannel`, or the end of `async for`) when the connection ends,
    or when the subscriber fell a whole buffer behind: then `overflowed` is True.

    Why end it on overflow: the reader must never wait for a subscriber, since
    responses to requests come through the same reader, and a subscriber that
    waits on a request while its buffer is full would deadlock the client. Dropping
    the notification instead would lose a `turn/completed` silently, and an
    unbounded buffer gives up backpressure. Ending the subscription makes the loss
    visible: the subscriber still receives what was buffered, then knows it missed
    some, reads the host's state (`thread/read`) and may subscribe again.

    With a `handler`, nothing is buffered: the client's reader task calls the
    handler with each notification as it routes it, and the subscription only
    tells its end (`receive` ends when the connection does, and raises what the
    handler raised, the subscription ended then). The handler sees a notification
    after every message before it on the connection was routed (a reply before it
    is in its request's slot, that request's task not resumed yet) and before any
    after it: a task whose reply came after a notification finds the handler's
    work for it done. Such a subscription never overflows. A buffered
    notification, by contrast, is taken in the subscriber's own task, in an order
    against the woken requests that Trio's scheduler picks, and each costs that
    task a step of its own.
    """

    def __init__(
        self,
        buffer: int,
        methods: frozenset[str] | None = None,
        handler: Callable[[Notification], None] | None = None,
    ) -> None:
        if buffer < 1 and handler is None:
            raise ValueError("a subscription needs a buffer of at least 1")
        self._send, self._receive = trio.open_memory_channel[Notification](
            0 if handler is not None else buffer
        )
        self._handler = handler
        self._ended = False
        self._error: Exception | None = None
        self.overflowed = False
        self.methods = methods
        """The methods it receives; None: every one."""

    async def receive(self) -> Notification:
        try:
            return await self._receive.receive()
        except trio.EndOfChannel:
            if self._error is not None:
                raise self._error from None
            raise

    async def aclose(self) -> None:
        self._end()
        await self._receive.aclose()

    def _offer(self, note: Notification) -> bool:
        """Hand `note` to the handler, or buffer it; False when the subscription
        has ended (now or before)."""
        if self._handler is not None:
            if self._ended:
                return False
            try:
                self._handler(note)
            except Exception as err:  # the subscriber's task raises it, as its own
                self._error = err
                self._end()
                return False
            return True
        try:
            self._send.send_nowait(note)
        except trio.WouldBlock:
            self.overflowed = True
            self._send.close()
            return False
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return False
        return True

    def _end(self) -> None:
        self._ended = True
        self._send.close()


class _Reply:
    """The slot of one request's reply: the first reply that comes, or none once
    the connection is lost. A memory channel did this at three times the cost (a
    request a call on the session backend, three on the App Server's); a
    `trio.Event` at a parking lot a request. The one waiting request is woken
    with `trio.lowlevel.reschedule`, as the journal writer's reply does."""

    __slots__ = ("_waiter", "came", "message")

    def __init__(self) -> None:
        self.came = False
        self.message: dict[str, Any] | None = None
        self._waiter: trio.lowlevel.Task | None = None

    def put(self, message: dict[str, Any]) -> None:
        """Keep `message` unless a reply came or the connection was lost (a
        duplicate reply is dropped)."""
        if not self.came:
            self.message = message
            self._come()

    def lose(self) -> None:
        """The connection is gone: the waiter wakes with no reply (unless one came)."""
        if not self.came:
            self._come()

    def _come(self) -> None:
        self.came = True
        if self._waiter is not None:
            trio.lowlevel.reschedule(self._waiter)
            self._waiter = None

    async def wait(self) -> dict[str, Any] | None:
        """The reply, or None once the connection was lost without one (a
        checkpoint either way)."""
        if self.came:
            await trio.lowlevel.checkpoint()
            return self.message

        def abort(_: trio.lowlevel.RaiseCancelT) -> trio.lowlevel.Abort:
            self._waiter = None
            return trio.lowlevel.Abort.SUCCEEDED

        self._waiter = trio.lowlevel.current_task()
        await trio.lowlevel.wait_task_rescheduled(abort)
        return self.message


class RpcClient:
    """Requests and notifications over one connection, untyped (`HostClient` adds
    the typed requests). Its reader is `run`, which `open_client` runs."""

    def __init__(
        self,
        transport: Transport,
        *,
        name: str = "the host",
        follows: frozenset[str] | None = None,
    ) -> None:
        self._transport = transport
        self._name = name
        self._follows = follows
        """The notifications this client may ever subscribe to (None: any); the
        host is asked at `initialize` not to send the others."""
        self._ids = itertools.count(1)
        self._pending: dict[int, _Reply] = {}
        self._subscriptions: set[Subscription] = set()
        self._lost: HostUnavailable | None = None
        self._wanted()

    @property
    def connected(self) -> bool:
        return self._lost is None

    @property
    def follows(self) -> frozenset[str] | None:
        """The notifications this client may ever subscribe to (None: any)."""
        return self._follows

    def _check(self) -> None:
        if self._lost is not None:
            raise HostUnavailable(str(self._lost))

    async def request(self, method: str, params: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Send a request and wait for its result.

        Raises:
            HostRequestError: the host answered with an error.
            HostUnavailable: the connection is gone, or goes before the answer.
        """
        self._check()
        request_id = next(self._ids)
        self._pending[request_id] = slot = _Reply()
        try:
            await self._transport.send({"id": request_id, "method": method, "params": params or {}})
            reply = await slot.wait()
            if reply is None:
                self._check()
                raise AssertionError("a request ended with the connection up")
        finally:
            del self._pending[request_id]
        if "error" in reply:
            raise HostRequestError.from_wire(method, reply["error"])
        result = reply.get("result")
        if result is None:
            return {}
        if not isinstance(result, dict):
            raise HostProtocolError(
                f"the host answered {method} with a result that is not an object"
            )
        return result

    async def notify(self, method: str, params: Mapping[str, Any] | None = None) -> None:
        self._check()
        message: dict[str, Any] = {"method": method}
        if params is not None:
            message["params"] = dict(params)
        await self._transport.send(message)

    @contextmanager
    def notifications(
        self,
        buffer: int = 256,
        methods: frozenset[str] | None = None,
        *,
        handler: Callable[[Notification], None] | None = None,
    ) -> Iterator[Subscription]:
        """Subscribe to every notification from now on (see `Subscription`), or to
        those of `methods` only (the others are never made or queued for it); with
        `handler`, each is handed to it in the client's reader task, unbuffered.

        Raises:
            HostUnavailable: the connection is already gone.
            ValueError: the client was opened to follow fewer notifications than
                `methods` (the host was told not to send the others).
        """
        self._check()
        if self._follows is not None and (methods is None or methods - self._follows):
            wanted = "every notification" if methods is None else sorted(methods - self._follows)
            raise ValueError(
                f"this client follows only {sorted(self._follows)}; the host sends it "
                f"none of {wanted}: open it with those in `follows`"
            )
        subscription = Subscription(buffer, methods, handler)
        self._subscriptions.add(subscription)
        self._wanted()
        try:
            yield subscription
        finally:
            self._subscriptions.discard(subscription)
            self._wanted()
            subscription._end()

    def _wanted(self) -> None:
        """Tell the transport which notifications to drop unread: those of
        NOTIFICATION_METHODS no subscription takes (all of them with none, as an
        owner's client that only sends requests)."""
        wanted: set[str] = set()
        for subscription in self._subscriptions:
            if subscription.methods is None:
                self._transport.ignore = frozenset()
                return
            wanted |= subscription.methods
        self._transport.ignore = NOTIFICATION_METHODS - wanted

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Read the connection until it ends; then fail every pending request and
        end every subscription. Never raises HostError."""
        async with trio.open_nursery() as replies:
            task_status.started()
            try:
                while True:
                    self._route(await self._transport.receive(), replies)
            except HostUnavailable as err:
                self._lose(err)
            finally:
                self._lose(HostUnavailable(f"the connection to {self._name} is closed"))

    def _route(self, message: dict[str, Any], replies: trio.Nursery) -> None:
        method, message_id = message.get("method"), message.get("id")
        if isinstance(method, str) and message_id is not None:
            replies.start_soon(self._refuse, message_id, method)
        elif isinstance(method, str):
            self._notify(method, message)
        elif isinstance(message_id, int) and message_id in self._pending:
            # A request given up is no longer pending; a duplicate reply is dropped.
            self._pending[message_id].put(message)

    def _notify(self, method: str, message: dict[str, Any]) -> None:
        """Offer a notification to the subscriptions that take its method; made
        only for them, without validation (its members' types are checked here)."""
        wanting = [s for s in self._subscriptions if s.methods is None or method in s.methods]
        if not wanting:
            return
        params, stamp = message.get("params"), message.get("emittedAtMs")
        note = Notification.model_construct(
            method=method,
            params=params if isinstance(params, dict) else {},
            emittedAtMs=stamp if isinstance(stamp, int) else None,
        )
        for subscription in wanting:
            if not subscription._offer(note):
                self._subscriptions.discard(subscription)
                self._wanted()

    async def _refuse(self, message_id: Any, method: str) -> None:
        """Answer a request of the host (an approval, say) so it never hangs on us."""
        error = {"code": METHOD_NOT_FOUND, "message": f"crw does not handle {method}"}
        with contextlib.suppress(HostUnavailable):  # the reader sees the loss, reports it
            await self._transport.send({"id": message_id, "error": error})

    def give_up(self, error: str) -> None:
        """Take the connection for lost though it is open: the host stopped
        answering (its process stopped, its end reads nothing). Every pending and
        later request raises HostUnavailable(`error`), and every subscription ends."""
        self._lose(HostUnavailable(error))

    def _lose(self, err: HostUnavailable) -> None:
        if self._lost is None:
            self._lost = err
        for slot in self._pending.values():
            slot.lose()
        for subscription in self._subscriptions:
            subscription._end()
        self._subscriptions.clear()
