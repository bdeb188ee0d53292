"""What the mock model answers: the replies a test scripts, what a Responses API
request asks for, and the server-sent events that answer it. Pure (a task packet a
spawn message names is read); serving them over HTTP is `crw.host.mock_model`'s.

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

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]

from crw.host.sim.instance import example_instance

CONTRACT_HEADING = "## Output contract"
PACKET_LINE = re.compile(r"Read the task packet (.+?) in full and follow it exactly\.")


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


NEW_TASK = "Message Type: NEW_TASK\n"
"""How a multi-agent v2 task (a spawn's or a follow-up's) begins: it reaches the
child as an `agent_message` input item, not a user message (docs/host.md)."""


def newest_user_text(body: dict[str, Any]) -> str:
    """The text of the last user message in a Responses request, or of the last
    v2 task (`agent_message` whose first part starts NEW_TASK: its parts joined,
    `encrypted_content` included, which is plain offline), whichever is later."""
    for item in reversed(body.get("input") or []):
        if isinstance(item, dict) and (item.get("role") == "user" or _is_v2_task(item)):
            content = item.get("content")
            if isinstance(content, str):
                return content
            return "\n".join(
                str(part.get("text", part.get("encrypted_content", "")))
                for part in content or []
                if isinstance(part, dict)
            )
    return ""


def _is_v2_task(item: dict[str, Any]) -> bool:
    content = item.get("content")
    first = content[0] if isinstance(content, list) and content else None
    text = first.get("text") if isinstance(first, dict) else None
    return item.get("type") == "agent_message" and str(text or "").startswith(NEW_TASK)


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
    (`Read the task packet PATH in full`, in any user message or v2 task of the
    conversation: a subagent's first one), or None. The packet is a file on this machine."""
    for item in body.get("input") or []:
        if not (isinstance(item, dict) and (item.get("role") == "user" or _is_v2_task(item))):
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
