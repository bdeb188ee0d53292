"""A tiny raw JSON-RPC client of the simulated host, and text helpers, for the
sim's tests (no test here). It speaks the wire as dicts, apart from crw's client."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from crw.host.sim.connection import connect_in_memory
from crw.host.sim.server import SimHost, open_sim_host
from crw.host.transport import Transport

Note = dict[str, Any]


class RpcFailure(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class RawClient:
    """Requests in order; every notification received is kept in `notes`."""

    def __init__(self, transport: Transport) -> None:
        self.transport = transport
        self.notes: list[Note] = []
        self._next_id = 0
        self._taken: set[int] = set()

    async def request(self, method: str, params: dict[str, Any] | None = None) -> Any:
        self._next_id += 1
        request_id = self._next_id
        await self.transport.send({"id": request_id, "method": method, "params": params or {}})
        while True:
            message = await self.transport.receive()
            if message.get("id") == request_id and "method" not in message:
                if "error" in message:
                    raise RpcFailure(message["error"]["code"], message["error"]["message"])
                return message["result"]
            self.notes.append(message)

    async def initialize(self, capabilities: dict[str, Any] | None = None) -> None:
        info = {"name": "sim-test", "title": "sim test", "version": "0"}
        await self.request("initialize", {"clientInfo": info, "capabilities": capabilities or {}})
        await self.transport.send({"method": "initialized"})

    async def wait_for(self, method: str, match: Callable[[Note], bool] = lambda p: True) -> Note:
        """The params of the first notification `method` that `match`es and was
        not waited for before, received now or earlier."""
        start = 0
        while True:
            for index in range(start, len(self.notes)):
                note = self.notes[index]
                if index not in self._taken and note["method"] == method and match(note["params"]):
                    self._taken.add(index)
                    return dict(note["params"])
            start = len(self.notes)
            self.notes.append(await self.transport.receive())

    async def turn_completed(self, turn_id: str) -> dict[str, Any]:
        """Wait for the turn to complete; its summary turn."""
        note = await self.wait_for("turn/completed", lambda p: p["turn"]["id"] == turn_id)
        return dict(note["turn"])

    def methods(self, thread_id: str | None = None) -> list[str]:
        """The notifications received, in order (for one thread, if named)."""
        return [n["method"] for n in self.notes if thread_id in (None, _thread_of(n["params"]))]


def _thread_of(params: dict[str, Any]) -> str | None:
    if "threadId" in params:
        return str(params["threadId"])
    thread = params.get("thread")
    return str(thread["id"]) if isinstance(thread, dict) else None


async def client_of(host: SimHost) -> RawClient:
    client = RawClient(await connect_in_memory(host))
    await client.initialize()
    return client


@asynccontextmanager
async def connected(tmp_path: Path) -> AsyncIterator[tuple[SimHost, RawClient]]:
    """A host whose CODEX_HOME is under `tmp_path`, and an initialized client."""
    async with open_sim_host(tmp_path / "codex-home") as host:
        client = await client_of(host)
        yield host, client
        await client.transport.aclose()


async def owner_and_agent(
    client: RawClient,
    agent_type: str = "worker",
    message: str = "m",
    *,
    owner_cwd: str | None = None,
    **spawn: Any,
) -> tuple[str, str]:
    """Start an owner thread (`sim/startOwner`, in `owner_cwd` when given) that
    spawns a subagent of `agent_type` with `message` and any further `spawn`
    params (`sim/spawnAgent`); the owner's and the subagent's thread ids."""
    params = {} if owner_cwd is None else {"cwd": owner_cwd}
    owner = (await client.request("sim/startOwner", params))["threadId"]
    spawned = {"parentThreadId": owner, "agentType": agent_type, "message": message, **spawn}
    agent = (await client.request("sim/spawnAgent", spawned))["agentId"]
    return str(owner), str(agent)


def task_text(marker: str, role: str, schema: dict[str, Any] | None, body: str = "Do it.") -> str:
    """A turn's text by the shared conventions: marker, role, body, output contract."""
    lines = [f"crw-flow-op: {marker}", f"CRW-ROLE: {role}", "", body]
    if schema is not None:
        contract = json.dumps(schema, indent=2)
        lines += ["", "## Output contract", "Answer one JSON object.", "```json", contract, "```"]
    return "\n".join(lines)


def text_input(text: str) -> list[dict[str, Any]]:
    return [{"type": "text", "text": text, "text_elements": []}]


def answer_of(turn: dict[str, Any]) -> Any:
    """The JSON of the turn's last agent message."""
    messages = [i for i in turn["items"] if i["type"] == "agentMessage"]
    return json.loads(messages[-1]["text"])


SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["verdict", "notes"],
    "additionalProperties": False,
    "properties": {
        "verdict": {"enum": ["pass", "fail"]},
        "notes": {"type": "array", "items": {"type": "string"}, "minItems": 1},
    },
}
