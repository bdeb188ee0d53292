"""A mock of the OpenAI Responses API, so the real `codex app-server` runs offline:
in the tests, and in `crw flow demo --backend app-server --host codex`. This module
serves it: an HTTP server on its own threads that records each request and
answers it as `crw.host.mock_replies` decides; it never decides a reply itself.

Why plain threads (`http.server.ThreadingHTTPServer`), not Trio: the client of
this server is a separate process (the real codex), and the test's Trio loop may
run under `MockClock(autojump_threshold=0)`, where an idle loop jumps virtual
time. A server on its own OS threads answers whatever the test's loop is doing
and whatever its clock says, and it is the same object in sync and async tests.
`MockModel.stop()` shuts the serving thread down and joins every handler thread.

`POST /v1/responses` is answered with server-sent events (`crw.host.mock_replies`
says what codex 0.163.0 accepts). Any other request answers 404 and is recorded
with `reply=None`; codex 0.163.0 asks for nothing else with this config.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from crw.host.mock_replies import (
    ModelRequest,
    Policy,
    Reply,
    newest_user_text,
    request_schema,
    sse_events,
    valid,
)

STOP_WAIT = 5.0
"""Seconds `MockModel.stop` waits for the requests being decided to be recorded."""


class _GoneAway(Exception):
    """The request's reply is `unreachable`: its handler drops the connection."""


class MockModel:
    """The mock Responses API on 127.0.0.1, a free port, its own threads.

    Use as a context manager (`with MockModel() as model:`) or call start/stop.
    `policy` replaces the default decision (valid instance unless scripted).
    """

    def __init__(self, policy: Policy | None = None) -> None:
        self._policy = policy
        self._lock = threading.Lock()
        self._scripts: list[tuple[str, list[Reply]]] = []
        self._requests: list[ModelRequest] = []
        self._ids = itertools.count(1)
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._refusing: threading.Thread | None = None
        self._handling = 0
        self._handled = threading.Condition(self._lock)

    @property
    def url(self) -> str:
        """The provider's base_url: `http://127.0.0.1:<port>/v1`."""
        assert self._server is not None, "the mock model is not started"
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    @property
    def requests(self) -> list[ModelRequest]:
        """Every request so far, oldest first (a copy)."""
        with self._lock:
            return list(self._requests)

    def script(self, key: str, *replies: Reply) -> None:
        """Answer requests whose newest user message contains `key` with `replies`,
        one a request, the last one repeating. A later script for the same key
        replaces the earlier; the first key that matches wins."""
        assert replies, "a script needs at least one reply"
        with self._lock:
            self._scripts = [(k, r) for k, r in self._scripts if k != key]
            self._scripts.append((key, list(replies)))

    def decide(self, request: ModelRequest) -> Reply:
        with self._lock:
            for key, replies in self._scripts:
                if key in request.user_text:
                    return replies.pop(0) if len(replies) > 1 else replies[0]
        return self._policy(request) if self._policy else valid()

    def handle(self, path: str, body: dict[str, Any]) -> list[dict[str, Any]]:
        """Decide and record one Responses request; the SSE events answering it."""
        user_text = newest_user_text(body)
        with self._lock:
            self._handling += 1
        try:
            reply = self.decide(ModelRequest(path, body, user_text, None))
            self.record(ModelRequest(path, body, user_text, reply))
        finally:
            with self._lock:
                self._handling -= 1
                self._handled.notify_all()
        if reply.kind == "unreachable":
            raise _GoneAway
        schema = request_schema(body, user_text)
        return list(sse_events(reply, schema, f"resp_{next(self._ids)}"))

    def record(self, request: ModelRequest) -> None:
        with self._lock:
            self._requests.append(request)

    def start(self) -> MockModel:
        server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, name="mock-model"
        )
        self._thread.start()
        return self

    def refuse(self) -> None:
        """Stop accepting connections from now on (in a thread of its own: the
        handler that asks cannot wait for the server to stop)."""
        server = self._server
        if server is not None and self._refusing is None:

            def close() -> None:
                server.shutdown()
                server.server_close()

            self._refusing = threading.Thread(target=close, name="mock-refuse")
            self._refusing.start()

    def stop(self) -> None:
        """Stop serving and join its threads. A request still being decided is
        recorded first (up to STOP_WAIT seconds): the server's handler threads are
        daemons, which closing it does not join."""
        if self._server is None:
            return
        with self._lock:
            self._handled.wait_for(lambda: self._handling == 0, STOP_WAIT)
        if self._refusing is not None:
            self._refusing.join()
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join()
        self._server = self._thread = None

    def __enter__(self) -> MockModel:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _handler_for(model: MockModel) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        timeout = 10  # a silent keep-alive connection cannot hold stop() forever

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            if self.path.rstrip("/") != "/v1/responses":
                self.not_found()
                return
            try:
                events = model.handle(self.path, json.loads(raw or b"{}"))
            except _GoneAway:
                model.refuse()
                self.close_connection = True
                with contextlib.suppress(OSError):
                    self.connection.shutdown(socket.SHUT_RDWR)
                return
            payload = "".join(
                f"event: {event['type']}\ndata: {json.dumps(event)}\n\n" for event in events
            ).encode()
            try:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True  # codex dropped it: an interrupted turn

        def do_GET(self) -> None:
            self.not_found()

        def not_found(self) -> None:
            model.record(ModelRequest(self.path, {}, "", None))
            self.send_error(404)

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: the requests are in `MockModel.requests`."""

    return Handler


CODEX_MODEL = "gpt-5.5"
"""A model in codex 0.163.0's bundled catalog, so codex asks for no metadata."""


def write_codex_home(home: Path, model_url: str) -> Path:
    """Make `home` a CODEX_HOME whose config points codex at the mock model at
    `model_url` (host-protocol.md, "Running the real host in tests, offline")."""
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text(
        f'model = "{CODEX_MODEL}"\n'
        'model_provider = "mock"\n'
        'approval_policy = "never"\n'
        "\n"
        "[model_providers.mock]\n"
        'name = "mock"\n'
        f'base_url = "{model_url}"\n'
        'wire_api = "responses"\n'
        "request_max_retries = 0\n"
        "stream_max_retries = 0\n"
        "\n"
        "[features]\n"
        "plugins = false\n"
        "apps = false\n"
        "\n"
        "[analytics]\n"
        "enabled = false\n"
    )
    return home
