"""The JSON-RPC client: routing, subscriptions, lost connections, both framings, real codex."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from trio_websocket import wrap_server_stream

import crw.host.connect as connect_module
from crw.host.client import HANDSHAKE_TIMEOUT, HostClient, open_client
from crw.host.connect import codex_binary, connect_host
from crw.host.errors import HostRequestError
from crw.host.protocol import (
    NOTIFICATION_METHODS,
    HostProtocolError,
    Notification,
    TurnNotification,
)
from crw.host.transport import (
    HostUnavailable,
    JsonLinesTransport,
    Transport,
    encode,
)
from crw.host.uri import parse_host_uri
from tests.deadlines import LOADED
from tests.host.ws_peer import TrioWebSocketPeer


class FakeHost:
    """The host's end of an in-memory connection; the test speaks for it."""

    def __init__(self, transport: Transport) -> None:
        self.transport = transport

    async def expect(self, method: str) -> dict[str, Any]:
        message = await self.transport.receive()
        assert message.get("method") == method, message
        return message

    async def answer(self, request: dict[str, Any], result: dict[str, Any]) -> None:
        await self.transport.send({"id": request["id"], "result": result})

    async def notify(self, method: str, **params: Any) -> None:
        await self.transport.send({"method": method, "params": params, "emittedAtMs": 1})


@asynccontextmanager
async def connected() -> AsyncIterator[tuple[HostClient, FakeHost]]:
    """A client initialized over an in-memory stream pair, and its fake host."""
    client_end, host_end = trio.testing.memory_stream_pair()
    host = FakeHost(JsonLinesTransport(host_end, name="the client"))
    # The handshake's answer waits in the stream: the first request has id 1.
    await host.transport.send({"id": 1, "result": {"userAgent": "fake"}})
    async with open_client(JsonLinesTransport(client_end)) as client:
        initialize = await host.expect("initialize")
        assert initialize["params"]["capabilities"] == {"experimentalApi": False}
        assert "params" not in await host.expect("initialized")
        yield client, host


async def serve_one(host: FakeHost, method: str, result: dict[str, Any]) -> dict[str, Any]:
    request = await host.expect(method)
    await host.answer(request, result)
    return request


async def call(
    host: FakeHost, method: str, result: dict[str, Any], request: Callable[[], Awaitable[Any]]
) -> tuple[dict[str, Any], Any]:
    """Run `request` against a host that answers `method` with `result`."""
    seen: dict[str, Any] = {}

    async def answer() -> None:
        seen.update(await serve_one(host, method, result))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(answer)
        value = await request()
    return seen["params"], value


IDLE = {"type": "idle"}
THREAD = {"id": "t1", "status": IDLE}
TURN = {"id": "u1", "status": "inProgress", "items": []}


async def test_concurrent_requests_are_answered_out_of_order(autojump_clock: Any) -> None:
    results: dict[str, dict[str, Any]] = {}
    async with connected() as (client, host):

        async def ask(name: str) -> None:
            results[name] = await client.request(name, {"n": name})

        async with trio.open_nursery() as nursery:
            nursery.start_soon(ask, "first")
            first = await host.expect("first")
            nursery.start_soon(ask, "second")
            second = await host.expect("second")
            await host.answer(second, {"of": "second"})
            await host.answer(first, {"of": "first"})
    assert results == {"first": {"of": "first"}, "second": {"of": "second"}}


async def test_two_subscribers_each_get_every_notification(autojump_clock: Any) -> None:
    async with connected() as (client, host):
        with client.notifications() as one, client.notifications() as two:
            for n in range(3):
                await host.notify("turn/completed", threadId=f"t{n}", turn=TURN)
            got_one = [await one.receive() for _ in range(3)]
            got_two = [await two.receive() for _ in range(3)]
    assert got_one == got_two
    assert [note.params["threadId"] for note in got_one] == ["t0", "t1", "t2"]
    parsed = got_one[0].parse()
    assert isinstance(parsed, TurnNotification) and parsed.turn.id == "u1"


async def test_subscription_only_sees_notifications_after_it_began(autojump_clock: Any) -> None:
    async with connected() as (client, host):
        await host.notify("thread/closed", threadId="early")
        await call(host, "thread/loaded/list", {"data": []}, client.thread_loaded_list)
        with client.notifications() as sub:
            await host.notify("thread/closed", threadId="late")
            note = await sub.receive()
    assert note.params == {"threadId": "late"}


async def test_full_subscriber_is_ended_overflowed_and_never_blocks_responses(
    autojump_clock: Any,
) -> None:
    """A subscriber a buffer behind loses its subscription, visibly; requests go on."""
    async with connected() as (client, host):
        with client.notifications(buffer=2) as slow, client.notifications(buffer=8) as fast:
            for n in range(3):
                await host.notify(
                    "thread/status/changed", threadId=f"t{n}", status={"type": "idle"}
                )
            async with trio.open_nursery() as nursery:
                answered: list[dict[str, Any]] = []

                async def ask() -> None:
                    answered.append(await client.request("thread/loaded/list"))

                nursery.start_soon(ask)
                await host.answer(await host.expect("thread/loaded/list"), {"data": []})
            received_slow = [note.params["threadId"] async for note in slow]
            received_fast = [(await fast.receive()).params["threadId"] for _ in range(3)]
            assert slow.overflowed and not fast.overflowed
            await host.notify("thread/closed", threadId="after")
            assert (await fast.receive()).method == "thread/closed"
    assert answered == [{"data": []}]
    assert received_slow == ["t0", "t1"]
    assert received_fast == ["t0", "t1", "t2"]


async def test_a_handler_takes_each_notification_in_the_readers_task_in_order_with_replies(
    autojump_clock: Any,
) -> None:
    """A handler is called as the reader routes each notification: after the
    reply before it is in its slot (its requester not resumed yet), before the
    reply after it; the requester of that later reply finds both handled. Nothing
    is buffered, so no number of them overflows it."""
    first: dict[str, Any] = {}
    handled: list[tuple[str, bool]] = []
    answers: list[list[tuple[str, bool]]] = []
    async with connected() as (client, host):

        def handle(note: Notification) -> None:
            slot = client._pending.get(first.get("id", -1))
            handled.append((note.params["n"], slot is not None and slot.message is not None))

        async def ask(name: str) -> None:
            await client.request(name)
            answers.append(list(handled))

        with client.notifications(handler=handle) as sub:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(ask, "first")
                first.update(await host.expect("first"))
                nursery.start_soon(ask, "second")
                second = await host.expect("second")
                batch = [
                    {"method": "thread/closed", "params": {"n": "before"}},
                    {"id": first["id"], "result": {}},
                    {"method": "thread/closed", "params": {"n": "between"}},
                    {"id": second["id"], "result": {}},
                ]
                await host.transport.send_encoded([encode(m) for m in batch])  # one write
            assert handled == [("before", False), ("between", True)]
            assert answers == [handled] * 2
            for n in range(300):  # more than the default buffer
                await host.notify("thread/closed", n=f"t{n}")
            await call(host, "thread/loaded/list", {"data": []}, client.thread_loaded_list)
            assert len(handled) == 302 and not sub.overflowed


async def test_a_handler_that_raises_ends_its_subscription_with_its_error(
    autojump_clock: Any,
) -> None:
    """The handler's error ends its subscription: the subscriber's task raises it
    (as when it handled the notification itself), no later notification reaches
    the handler, and the client goes on answering requests."""
    handled: list[str] = []

    def handle(note: Notification) -> None:
        handled.append(note.params["threadId"])
        if note.params["threadId"] == "bad":
            raise HostProtocolError("a notification that does not fit")

    async with connected() as (client, host):
        with client.notifications(handler=handle) as sub:
            for thread in ("good", "bad", "later"):
                await host.notify("thread/closed", threadId=thread)
            with pytest.raises(HostProtocolError, match="does not fit"):
                await sub.receive()
            _, ids = await call(
                host, "thread/loaded/list", {"data": ["t1"]}, client.thread_loaded_list
            )
    assert handled == ["good", "bad"]
    assert ids == ["t1"]


async def test_host_error_raises_host_request_error_naming_the_method(
    autojump_clock: Any,
) -> None:
    async with connected() as (client, host):

        async def refuse() -> None:
            request = await host.expect("thread/read")
            error = {"code": -32600, "message": "thread not found:\n t9", "data": {"x": 1}}
            await host.transport.send({"id": request["id"], "error": error})

        async with trio.open_nursery() as nursery:
            nursery.start_soon(refuse)
            with pytest.raises(HostRequestError) as caught:
                await client.thread_read("t9")
        assert client.connected
    err = caught.value
    assert (err.method, err.code, err.message, err.data) == (
        "thread/read",
        -32600,
        "thread not found:\n t9",
        {"x": 1},
    )
    assert str(err) == "the host refused thread/read: thread not found: t9 (code -32600)"


async def test_a_request_takes_its_first_reply_in_a_slot_not_a_memory_channel(
    autojump_clock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A request waits on a one-shot slot for its reply, not on a memory channel
    of its own (three times the CPU, once a request); the first reply is taken
    and a duplicate dropped, and the next request is answered as before."""
    channels: list[float] = []

    class Counted:
        """`trio.open_memory_channel`, counting the channels opened."""

        def __getitem__(self, _: Any) -> Counted:
            return self

        def __call__(self, size: float) -> Any:
            channels.append(size)
            return open_channel(size)

    open_channel = trio.open_memory_channel
    async with connected() as (client, host):
        monkeypatch.setattr(trio, "open_memory_channel", Counted())
        results: list[dict[str, Any]] = []

        async def ask(name: str) -> None:
            results.append(await client.request(name))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(ask, "first")
            first = await host.expect("first")
            await host.answer(first, {"of": "first"})
            await host.answer(first, {"of": "a duplicate"})
        _, second = await call(host, "second", {"of": "second"}, lambda: client.request("second"))
    assert results == [{"of": "first"}] and second == {"of": "second"}
    assert channels == []


async def test_a_request_waits_for_its_reply_without_an_event(
    autojump_clock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A request's reply slot wakes its one waiter itself: no `trio.Event` (and
    its parking lot) a request, three a call of an App Server run. A request
    cancelled while it waits is no longer pending and its late reply is dropped;
    one whose connection goes raises HostUnavailable."""
    events: list[object] = []
    make_event = trio.Event

    def counted() -> trio.Event:
        events.append(None)
        return make_event()

    async with connected() as (client, host):
        monkeypatch.setattr(trio, "Event", counted)
        _, first = await call(host, "first", {"of": "first"}, lambda: client.request("first"))
        with trio.move_on_after(1):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(client.request, "never")
                given_up = await host.expect("never")
        await host.answer(given_up, {"of": "too late"})
        _, second = await call(host, "second", {"of": "second"}, lambda: client.request("second"))
        monkeypatch.setattr(trio, "Event", make_event)

        async def lost() -> None:
            with pytest.raises(HostUnavailable):
                await client.request("lost")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(lost)
            await host.expect("lost")
            await host.transport.aclose()
    assert first == {"of": "first"} and second == {"of": "second"}
    assert events == []


async def test_peer_closing_mid_request_fails_pending_and_later_calls(
    autojump_clock: Any,
) -> None:
    outcomes: list[BaseException] = []
    async with connected() as (client, host):
        with client.notifications() as sub:

            async def pending() -> None:
                try:
                    await client.thread_read("t1")
                except HostUnavailable as err:
                    outcomes.append(err)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(pending)
                await host.expect("thread/read")
                await host.transport.aclose()
            assert [note async for note in sub] == []
            assert not sub.overflowed
        assert not client.connected
        with pytest.raises(HostUnavailable):
            await client.turn_start("t1", "hello")
        with pytest.raises(HostUnavailable), client.notifications():
            pass
    assert len(outcomes) == 1
    assert "\n" not in str(outcomes[0])


async def test_host_request_is_answered_method_not_found(autojump_clock: Any) -> None:
    """The real host may ask for approvals: it gets an error, never silence."""
    async with connected() as (client, host):
        await host.transport.send(
            {"id": "srv-7", "method": "item/commandExecution/requestApproval", "params": {}}
        )
        refusal = await host.transport.receive()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(client.thread_unsubscribe, "t1")
            await host.answer(await host.expect("thread/unsubscribe"), {"status": "unsubscribed"})
    assert refusal["id"] == "srv-7"
    assert refusal["error"]["code"] == -32601


async def test_error_in_the_block_comes_out_alone(autojump_clock: Any) -> None:
    """Not wrapped in an ExceptionGroup by the client's nursery."""
    with pytest.raises(LookupError):
        async with connected():
            raise LookupError("from the block")


async def test_host_that_never_answers_initialize_is_unavailable(autojump_clock: Any) -> None:
    client_end, _host_end = trio.testing.memory_stream_pair()
    with pytest.raises(HostUnavailable, match="initialize"):
        async with open_client(JsonLinesTransport(client_end), name="the fake"):
            pass
    assert trio.current_time() == pytest.approx(HANDSHAKE_TIMEOUT)


async def test_turn_start_sends_one_text_input_and_only_given_options(
    autojump_clock: Any,
) -> None:
    schema = {"type": "object"}
    async with connected() as (client, host):
        params, started = await call(
            host,
            "turn/start",
            {"turn": TURN},
            lambda: client.turn_start("t1", "hi", model="gpt-5.5", output_schema=schema),
        )
    assert params == {
        "threadId": "t1",
        "input": [{"type": "text", "text": "hi", "text_elements": []}],
        "model": "gpt-5.5",
        "outputSchema": schema,
    }
    assert (started.id, started.status) == ("u1", "inProgress")


async def test_thread_requests_send_protocol_params(autojump_clock: Any) -> None:
    answer = {"thread": THREAD, "model": "gpt-5.5"}
    async with connected() as (client, host):
        read, thread = await call(host, "thread/read", answer, lambda: client.thread_read("t1"))
        resume, _ = await call(
            host,
            "thread/resume",
            answer,
            lambda: client.thread_resume("t1", config={"a.b": 1}, model="m"),
        )
        fork, _ = await call(
            host, "thread/fork", answer, lambda: client.thread_fork("t1", last_turn_id="u1")
        )
        start, _ = await call(host, "thread/start", answer, lambda: client.thread_start(cwd="/w"))
        interrupt, _ = await call(
            host, "turn/interrupt", {}, lambda: client.turn_interrupt("t1", "u1")
        )
    assert thread.id == "t1" and thread.status.type == "idle"
    assert read == {"threadId": "t1", "includeTurns": True}
    assert resume == {"threadId": "t1", "excludeTurns": True, "config": {"a.b": 1}, "model": "m"}
    assert fork == {"threadId": "t1", "lastTurnId": "u1"}
    assert start == {"cwd": "/w"}
    assert interrupt == {"threadId": "t1", "turnId": "u1"}


async def test_thread_list_gives_one_page_and_its_cursor(autojump_clock: Any) -> None:
    async with connected() as (client, host):
        params, (threads, cursor) = await call(
            host,
            "thread/list",
            {"data": [THREAD], "nextCursor": "c2"},
            lambda: client.thread_list(sourceKinds=["subAgentThreadSpawn"], limit=10),
        )
    assert params == {"sourceKinds": ["subAgentThreadSpawn"], "limit": 10}
    assert [thread.id for thread in threads] == ["t1"]
    assert cursor == "c2"


async def test_thread_loaded_list_follows_cursors(autojump_clock: Any) -> None:
    ids: list[str] = []
    async with connected() as (client, host):

        async def ask() -> None:
            ids.extend(await client.thread_loaded_list())

        async with trio.open_nursery() as nursery:
            nursery.start_soon(ask)
            first = await serve_one(host, "thread/loaded/list", {"data": ["a"], "nextCursor": "c"})
            second = await serve_one(
                host, "thread/loaded/list", {"data": ["b"], "nextCursor": None}
            )
    assert (first["params"], second["params"]) == ({}, {"cursor": "c"})
    assert ids == ["a", "b"]


async def test_answer_that_does_not_fit_is_a_protocol_error(autojump_clock: Any) -> None:
    async with connected() as (client, host), trio.open_nursery() as nursery:
        nursery.start_soon(serve_one, host, "thread/read", {"thread": {"id": "t1"}})
        with pytest.raises(HostProtocolError, match="thread/read"):
            await client.thread_read("t1")


# WebSocket framing end to end, on real sockets (so on the real clock).


async def websocket_host(transport: Transport) -> None:
    """Answers every request; `thread/loaded/list` with one large page, after a
    notification."""
    big = "x" * (2 * 1024 * 1024)
    while True:
        try:
            message = await transport.receive()
        except HostUnavailable:
            return
        if message.get("method") == "thread/loaded/list":
            await transport.send({"method": "thread/closed", "params": {"threadId": "t1"}})
            await transport.send({"id": message["id"], "result": {"data": ["t1", big]}})
        elif "id" in message:
            await transport.send({"id": message["id"], "result": {}})


async def serve_websocket_connection(stream: trio.SocketStream) -> None:
    """One connection, served as a shared app-server serves it (host-protocol.md)."""
    async with trio.open_nursery() as nursery:
        request = await wrap_server_stream(nursery, stream, max_message_size=64 * 1024 * 1024)
        ws = await request.accept()
        await websocket_host(TrioWebSocketPeer(ws))
        nursery.cancel_scope.cancel()


async def assert_speaks(uri: str) -> None:
    async with connect_host(parse_host_uri(uri)) as client:
        with client.notifications() as sub:
            loaded = await client.thread_loaded_list()
            note = await sub.receive()
    assert loaded[0] == "t1" and len(loaded[1]) == 2 * 1024 * 1024
    assert note == Notification(method="thread/closed", params={"threadId": "t1"})


async def test_connect_host_speaks_websocket_on_a_unix_socket() -> None:
    with tempfile.TemporaryDirectory(prefix="crw-") as tmp:
        path = Path(tmp) / "host.sock"
        sock = trio.socket.socket(trio.socket.AF_UNIX, trio.socket.SOCK_STREAM)
        await sock.bind(str(path))
        sock.listen()
        async with trio.open_nursery() as nursery:
            listeners = [trio.SocketListener(sock)]
            await nursery.start(trio.serve_listeners, serve_websocket_connection, listeners)
            await assert_speaks(f"unix:{path}")
            nursery.cancel_scope.cancel()


async def test_connect_host_speaks_websocket_on_loopback_tcp() -> None:
    async with trio.open_nursery() as nursery:
        serve = partial(trio.serve_tcp, serve_websocket_connection, 0, host="127.0.0.1")
        listeners = await nursery.start(serve)
        port = listeners[0].socket.getsockname()[1]
        await assert_speaks(f"ws://127.0.0.1:{port}")
        nursery.cancel_scope.cancel()


async def reject_upgrade(stream: trio.SocketStream) -> None:
    async with trio.open_nursery() as nursery:
        request = await wrap_server_stream(nursery, stream)
        await request.reject(403)


async def test_refused_websocket_upgrade_is_unavailable_naming_the_host() -> None:
    async with trio.open_nursery() as nursery:
        serve = partial(trio.serve_tcp, reject_upgrade, 0, host="127.0.0.1")
        listeners = await nursery.start(serve)
        uri = f"ws://127.0.0.1:{listeners[0].socket.getsockname()[1]}"
        with pytest.raises(HostUnavailable, match="cannot reach the host") as caught:
            async with connect_host(parse_host_uri(uri)):
                pass
        nursery.cancel_scope.cancel()
    assert uri in str(caught.value)


async def test_missing_unix_socket_is_unavailable_naming_it() -> None:
    with tempfile.TemporaryDirectory(prefix="crw-") as tmp:
        uri = f"unix:{tmp}/nobody.sock"
        with pytest.raises(HostUnavailable, match="cannot reach the host") as caught:
            async with connect_host(parse_host_uri(uri)):
                pass
    assert uri in str(caught.value) and "--listen" in str(caught.value)


async def test_closed_tcp_port_is_unavailable_naming_it() -> None:
    with trio.socket.socket() as probe:
        await probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    uri = f"ws://127.0.0.1:{port}"
    with pytest.raises(HostUnavailable, match="cannot reach the host") as caught:
        async with connect_host(parse_host_uri(uri)):
            pass
    assert uri in str(caught.value)


# The codex child over stdio.

LINGERING_CODEX = """\
import json, os, sys, time
sys.stderr.write(f"started with MARK={os.environ.get('MARK')}\\n")
sys.stderr.flush()
open(sys.argv[0] + ".pid", "w").write(str(os.getpid()))
for line in sys.stdin:
    message = json.loads(line)
    if "id" in message:
        print(json.dumps({"id": message["id"], "result": {"data": ["t1"]}}), flush=True)
time.sleep(60)  # ignores the end of stdin, as a stuck server would
"""


def child_pids() -> set[int]:
    """The pids of this process's live children, from /proc."""
    pids = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == os.getpid():
            pids.add(int(stat.parent.name))
    return pids


def test_codex_binary_prefers_the_explicit_path_then_crw_codex_bin_then_the_bundled_one() -> None:
    named = {"CRW_CODEX_BIN": "/npm/codex"}
    assert codex_binary("/opt/codex", named) == "/opt/codex"
    assert codex_binary(None, named) == "/npm/codex"
    assert Path(codex_binary(None, {})).name == "codex"


async def test_missing_codex_binary_is_unavailable_naming_it(tmp_path: Path) -> None:
    missing = str(tmp_path / "no-codex")
    with pytest.raises(HostUnavailable, match="cannot start the host codex") as caught:
        async with connect_host(parse_host_uri("codex"), codex_bin=missing):
            pass
    assert missing in str(caught.value) and "--codex-bin" in str(caught.value)


async def test_codex_child_that_lingers_is_killed_and_logs_its_stderr(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(connect_module, "CHILD_EXIT_GRACE", 0.2)
    script = tmp_path / "codex"
    script.write_text(f"#!{sys.executable}\n{LINGERING_CODEX}")
    script.chmod(0o755)
    log = tmp_path / "host.log"
    env = {**os.environ, "MARK": "m1"}
    async with connect_host(
        parse_host_uri("codex"), codex_bin=str(script), env=env, stderr=log
    ) as client:
        assert await client.thread_loaded_list() == ["t1"]
        pid = int(await trio.Path(f"{script}.pid").read_text())
        assert pid in child_pids()
    assert pid not in child_pids()
    assert log.read_text() == "started with MARK=m1\n"


LAUNCHER = """\
import subprocess, sys
child = subprocess.Popen([sys.executable, sys.argv[0] + ".real"])
open(sys.argv[0] + ".child", "w").write(str(child.pid))
sys.exit(child.wait())
"""
"""A launcher as npm's `codex` is on a Node without execve: the server its child,
its stdio inherited."""


def alive(pid: int) -> bool:
    """The process is there and not a zombie waiting for its reaper."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


async def test_a_lingering_codex_behind_a_launcher_is_killed_with_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """codex installed by npm runs behind a launcher (node); a server that lingers
    after its stdin closed is killed with its whole process group, never left
    behind as an orphan."""
    monkeypatch.setattr(connect_module, "CHILD_EXIT_GRACE", 0.2)
    script = tmp_path / "codex"
    script.write_text(f"#!{sys.executable}\n{LAUNCHER}")
    script.chmod(0o755)
    (tmp_path / "codex.real").write_text(LINGERING_CODEX)
    server = 0
    try:
        async with connect_host(parse_host_uri("codex"), codex_bin=str(script)) as client:
            assert await client.thread_loaded_list() == ["t1"]
            server = int(await trio.Path(f"{script}.real.pid").read_text())
            assert alive(server)
        with trio.fail_after(10):  # killed at once; a leftover sleeps for 60 s
            while True:
                if not alive(server):
                    break
                await trio.sleep(0.02)
    finally:
        if server:
            with contextlib.suppress(ProcessLookupError):
                os.kill(server, signal.SIGKILL)


@pytest.mark.codex
async def test_real_codex_app_server_handshakes_and_lists_loaded_threads(
    tmp_path: Path,
) -> None:
    """The real `codex app-server` (each binary: tests/codex_bins.py) over stdio,
    offline; no model is asked."""
    try:
        binary = codex_binary(None)
    except HostUnavailable as err:
        pytest.skip(f"the real codex binary is not installed: {err}")
    if not await trio.Path(binary).exists():
        pytest.skip(f"the real codex binary is not installed at {binary}")
    home = tmp_path / "codex-home"
    home.mkdir()
    (home / "config.toml").write_text(
        "[features]\nplugins = false\napps = false\n\n[analytics]\nenabled = false\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "CODEX_"))}
    env["CODEX_HOME"] = str(home)
    before = child_pids()
    with trio.fail_after(LOADED):  # a hang guard: the binary's start is the machine's
        async with connect_host(
            parse_host_uri("codex"), env=env, stderr=tmp_path / "host.log"
        ) as client:
            assert await client.thread_loaded_list() == []
    assert child_pids() <= before


async def run_websocket_server(
    listeners: list[trio.SocketListener],
    *,
    task_status: trio.TaskStatus[trio.CancelScope] = trio.TASK_STATUS_IGNORED,
) -> None:
    with trio.CancelScope() as scope:
        async with trio.open_nursery() as nursery:
            await nursery.start(trio.serve_listeners, serve_websocket_connection, listeners)
            task_status.started(scope)


async def test_websocket_host_going_away_fails_the_request_outside_the_block() -> None:
    """The error comes out of connect_host alone, not in an ExceptionGroup."""
    with tempfile.TemporaryDirectory(prefix="crw-") as tmp:
        path = Path(tmp) / "host.sock"
        sock = trio.socket.socket(trio.socket.AF_UNIX, trio.socket.SOCK_STREAM)
        await sock.bind(str(path))
        sock.listen()
        async with trio.open_nursery() as nursery:
            server = await nursery.start(run_websocket_server, [trio.SocketListener(sock)])
            with pytest.raises(HostUnavailable, match="closed"):
                async with connect_host(parse_host_uri(f"unix:{path}")) as client:
                    server.cancel()
                    await client.thread_read("t1")


async def test_a_notification_no_subscription_takes_is_never_made(
    autojump_clock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run follows five methods of the twenty a turn brings: the others are routed
    away without a Notification built for them."""
    made: list[str] = []
    construct = Notification.model_construct

    def counting(*args: Any, **fields: Any) -> Notification:
        made.append(fields["method"])
        return construct(*args, **fields)

    monkeypatch.setattr(Notification, "model_construct", counting)
    async with connected() as (client, host):
        await host.notify("item/completed", threadId="t1")
        with client.notifications(methods=frozenset({"turn/completed"})) as sub:
            await host.notify("item/completed", threadId="t1")
            await host.notify("turn/completed", threadId="t1", turn=TURN)
            note = await sub.receive()
    assert note.method == "turn/completed"
    assert made == ["turn/completed"]


async def test_a_client_opened_to_follow_some_notifications_opts_out_of_the_others() -> None:
    """`follows` becomes `capabilities.optOutNotificationMethods` at `initialize`:
    every notification method crw knows but those, so the host sends none of them
    (its transport then drops nothing unread: nothing comes to drop)."""
    follows = frozenset({"turn/completed", "error"})
    client_end, host_end = trio.testing.memory_stream_pair()
    host = FakeHost(JsonLinesTransport(host_end, name="the client"))
    await host.transport.send({"id": 1, "result": {"userAgent": "fake"}})
    async with open_client(JsonLinesTransport(client_end), follows=follows):
        initialize = await host.expect("initialize")
    opted = initialize["params"]["capabilities"]["optOutNotificationMethods"]
    assert opted == sorted(NOTIFICATION_METHODS - follows)
    assert {"thread/started", "item/completed", "item/agentMessage/delta"} <= set(opted)
    assert initialize["params"]["capabilities"]["experimentalApi"] is False


@pytest.mark.parametrize("methods", [None, frozenset({"turn/completed", "item/completed"})])
async def test_a_subscription_to_what_the_client_opted_out_of_is_refused(
    methods: frozenset[str] | None,
) -> None:
    """The host was told not to send those: a subscription to them would wait
    forever, so it is refused at once, and nothing is subscribed."""
    client_end, host_end = trio.testing.memory_stream_pair()
    host = FakeHost(JsonLinesTransport(host_end, name="the client"))
    await host.transport.send({"id": 1, "result": {"userAgent": "fake"}})
    follows = frozenset({"turn/completed"})
    async with open_client(JsonLinesTransport(client_end), follows=follows) as client:
        with (
            pytest.raises(ValueError, match="follows only") as refused,
            client.notifications(methods=methods),
        ):
            pass
        with client.notifications(methods=follows) as sub:
            await host.expect("initialize")
            await host.expect("initialized")
            await host.notify("turn/completed", threadId="t1", turn=TURN)
            note = await sub.receive()
    assert note.method == "turn/completed"
    assert "open it with those in `follows`" in str(refused.value)
