"""A mock of the OpenAI Responses API, so the real `codex app-server` runs offline:
in the tests, and in `crw flow demo --backend app-server --host codex`.

Why plain threads (`http.server.ThreadingHTTPServer`), not Trio: the client of
this server is a separate process (the real codex), and the test's Trio loop may
run under `MockClock(autojump_threshold=0)`, where an idle loop jumps virtual
time. A server on its own OS threads answers whatever the test's loop is doing
and whatever its clock says, and it is the same object in sync and async tests.
`MockModel.stop()` shuts the serving thread down and joins every handler thread.

What codex 0.163.0 accepts (tried here; see docs/host-testing.md):

- `POST /v1/responses` with a JSON body `{model, instructions, input: [...],
  tools, stream: true, ...}`; `input` is the whole conversation, user messages
  as `{"type": "message", "role": "user", "content": [{"type": "input_text",
  "text"}]}`. The answer is `text/event-stream`, one `event: <type>` and one
  `data: <json>` line an event, a blank line after each:

  1. `{"type": "response.created", "response": {"id"}}`
  2. one `{"type": "response.output_item.done", "output_index": i, "item":
     {"type": "message", "role": "assistant", "id", "status": "completed",
     "phase": "final_answer", "content": [{"type": "output_text", "text",
     "annotations": []}]}}` an item (or a `function_call` item with `call_id`,
     `name`, `arguments` and, for a namespaced tool, `namespace`);
  3. `{"type": "response.completed", "response": {"id", "usage":
     {"input_tokens", "input_tokens_details": {"cached_tokens"},
     "output_tokens", "output_tokens_details": {"reasoning_tokens"},
     "total_tokens"}}}`; codex records exactly these counts;
  - or instead of 2-3 `{"type": "response.failed", "response": {"id", "error":
    {"code", "message"}}}`: `context_length_exceeded` ends the turn with
    `contextWindowExceeded`, `insufficient_quota` with `usageLimitExceeded`.

- Any other request answers 404 and is recorded with `reply=None`; codex
  0.163.0 asks for nothing else with this config.

By default each request is answered with a valid instance
(`crw.host.sim.instance.example_instance`) of the schema the newest user
message's output contract names (the last ```json block after its last `##
Output contract` line), else of the contract of the task packet a session
spawn message names (`Read the task packet PATH in full`: a subagent's first
message), else of the turn's `outputSchema` (codex sends it as
`text.format.schema`), else `{}`. `MockModel.script(key, *replies)` overrides that for
requests whose newest user message contains `key`: each such request takes the
next reply, and the last one repeats.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import re
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]

from crw.host.sim.instance import example_instance

CONTRACT_HEADING = "## Output contract"
PACKET_LINE = re.compile(r"Read the task packet (\S+) in full")


@dataclass(frozen=True)
class Usage:
    """Token counts of one model response, in the Responses API's parts."""

    input_tokens: int = 1000
    cached_tokens: int = 200
    output_tokens: int = 50
    reasoning_tokens: int = 10
    total_tokens: int | None = None
    """None: input_tokens + output_tokens, as the API counts it."""

    @property
    def total(self) -> int:
        if self.total_tokens is None:
            return self.input_tokens + self.output_tokens
        return self.total_tokens

    def as_api(self) -> dict[str, Any]:
        return {
            "input_tokens": self.input_tokens,
            "input_tokens_details": {"cached_tokens": self.cached_tokens},
            "output_tokens": self.output_tokens,
            "output_tokens_details": {"reasoning_tokens": self.reasoning_tokens},
            "total_tokens": self.total,
        }


@dataclass(frozen=True)
class FunctionCall:
    """A tool call the model makes, e.g. `multi_agent_v1` `spawn_agent`."""

    name: str
    arguments: dict[str, Any]
    namespace: str | None = None
    call_id: str | None = None
    """None: a fresh id per response."""


@dataclass(frozen=True)
class Reply:
    """One model response.

    Kinds: `valid` (the contract's example instance), `invalid` (JSON that
    fails the contract), `text` (the given text), `fail` (response.failed with
    `code`). `prose` is a commentary message sent before the answer; `calls`
    are tool calls sent after it (a response may be calls only: `kind="none"`).
    """

    kind: str = "valid"
    text: str = ""
    phase: str | None = "final_answer"
    code: str = ""
    prose: str | None = None
    calls: tuple[FunctionCall, ...] = ()
    usage: Usage = field(default_factory=Usage)


def valid(*, usage: Usage | None = None, phase: str | None = "final_answer") -> Reply:
    return Reply("valid", phase=phase, usage=usage or Usage())


def invalid(*, usage: Usage | None = None) -> Reply:
    return Reply("invalid", usage=usage or Usage())


def text(body: str, *, phase: str | None = "final_answer", usage: Usage | None = None) -> Reply:
    return Reply("text", text=body, phase=phase, usage=usage or Usage())


def fail(code: str) -> Reply:
    """`context_length_exceeded`, `insufficient_quota`, `rate_limit_exceeded`, …"""
    return Reply("fail", code=code)


def unreachable() -> Reply:
    """The model's endpoint goes away: this request's connection is dropped and
    every connection after it refused, so codex (with stream retries) only retries
    the turn, `Reconnecting... waiting for network`, as when a private model's
    endpoint refuses connections. Every later request of every thread meets it."""
    return Reply("unreachable")


class _GoneAway(Exception):
    """The request's reply is `unreachable`: its handler drops the connection."""


def calls(*items: FunctionCall, usage: Usage | None = None) -> Reply:
    return Reply("none", calls=items, usage=usage or Usage())


@dataclass(frozen=True)
class ModelRequest:
    """One request codex made, as the mock saw it."""

    path: str
    body: dict[str, Any]
    user_text: str
    """The newest user message's text (its input_text parts, joined)."""
    reply: Reply | None


Policy = Callable[[ModelRequest], Reply]


def newest_user_text(body: dict[str, Any]) -> str:
    """The text of the last user message in a Responses request."""
    for item in reversed(body.get("input") or []):
        if isinstance(item, dict) and item.get("role") == "user":
            content = item.get("content")
            if isinstance(content, str):
                return content
            return "\n".join(
                part.get("text", "") for part in content or [] if isinstance(part, dict)
            )
    return ""


def contract_schema(message: str) -> Any:
    """The schema of the last ```json block after the last contract heading."""
    lines = message.splitlines()
    heads = [i for i, line in enumerate(lines) if line.strip() == CONTRACT_HEADING]
    if not heads:
        return None
    found: str | None = None
    block: list[str] | None = None
    for line in lines[heads[-1] + 1 :]:
        if block is None and line.strip() == "```json":
            block = []
        elif block is not None and line.strip() == "```":
            found, block = "\n".join(block), None
        elif block is not None:
            block.append(line)
    return json.loads(found) if found is not None else None


def failing_instance(schema: Any) -> Any:
    """A JSON value that the schema rejects (a schema that takes all gets a string)."""
    candidates: list[Any] = [[], "crw-mock-invalid", 0, {}, None, {"crw_mock": [None]}]
    for candidate in candidates:
        if not jsonschema.Draft202012Validator(schema).is_valid(candidate):
            return candidate
    return "crw-mock-invalid"


def packet_schema(body: dict[str, Any]) -> Any:
    """The contract's schema of the task packet a session spawn message names
    (`Read the task packet PATH in full`, in any user message of the conversation:
    a subagent's first one), or None. The packet is a file on this machine."""
    for item in body.get("input") or []:
        if not (isinstance(item, dict) and item.get("role") == "user"):
            continue
        found = PACKET_LINE.search(newest_user_text({"input": [item]}))
        if found is not None and Path(found.group(1)).is_file():
            return contract_schema(Path(found.group(1)).read_text())
    return None


def request_schema(body: dict[str, Any], user_text: str) -> Any:
    """The schema an answer must meet: the contract's, else the contract of the
    packet a spawn message names, else the turn's outputSchema (codex sends it as
    `text.format.schema`), else any JSON object."""
    schema = contract_schema(user_text)
    if schema is None:
        schema = packet_schema(body)
    if schema is None:
        text_format = (body.get("text") or {}).get("format") or {}
        schema = text_format.get("schema")
    return {"type": "object"} if schema is None else schema


def answer_text(reply: Reply, schema: Any) -> str:
    if reply.kind == "text":
        return reply.text
    value = example_instance(schema) if reply.kind == "valid" else failing_instance(schema)
    return json.dumps(value)


def sse_events(reply: Reply, schema: Any, response_id: str) -> Iterator[dict[str, Any]]:
    """The server-sent events answering one request with `reply`."""
    yield {"type": "response.created", "response": {"id": response_id}}
    if reply.kind == "fail":
        error = {"code": reply.code, "message": f"mock model: {reply.code}"}
        yield {"type": "response.failed", "response": {"id": response_id, "error": error}}
        return
    items: list[dict[str, Any]] = []
    if reply.prose is not None:
        items.append(_message(reply.prose, "commentary"))
    if reply.kind != "none":
        items.append(_message(answer_text(reply, schema), reply.phase))
    items.extend(_function_call(call, f"{response_id}_{n}") for n, call in enumerate(reply.calls))
    for index, item in enumerate(items):
        item["id"] = f"{response_id}_item{index}"
        yield {"type": "response.output_item.done", "output_index": index, "item": item}
    usage = reply.usage.as_api()
    yield {"type": "response.completed", "response": {"id": response_id, "usage": usage}}


def _message(body: str, phase: str | None) -> dict[str, Any]:
    item: dict[str, Any] = {
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": body, "annotations": []}],
    }
    if phase is not None:
        item["phase"] = phase
    return item


def _function_call(call: FunctionCall, fresh_id: str) -> dict[str, Any]:
    item: dict[str, Any] = {
        "type": "function_call",
        "status": "completed",
        "call_id": call.call_id or f"call_{fresh_id}",
        "name": call.name,
        "arguments": json.dumps(call.arguments),
    }
    if call.namespace is not None:
        item["namespace"] = call.namespace
    return item


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
        reply = self.decide(ModelRequest(path, body, user_text, None))
        self.record(ModelRequest(path, body, user_text, reply))
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
        """Stop serving and join every thread (handler threads included)."""
        if self._server is None:
            return
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
