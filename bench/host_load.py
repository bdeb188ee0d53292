"""The simulated host's CPU per 1,000 calls under the session bench's load, without
the run process: a real `crw host sim serve` (a child), driven by two WebSocket
clients of this process, the owner's (it opts out of every notification) and the
run's (it opts out of what its HostReader does not follow). Per call, as bench/scale.py's
session backend asks the host: sim/spawnAgent, the turn's end awaited, thread/read
with turns, a thread/list page of 100 subagents every 33rd call, sim/closeAgent;
POOL calls in flight.

The host's user and system CPU (/proc/<pid>/stat) from its first call to its last,
per 1,000 calls: its start is not in it, nor is any other process's CPU.

    .venv/bin/python bench/host_load.py [--calls 1500] [--pool 8]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import trio

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from crw.actors.thread_watches import FOLLOWED  # noqa: E402
from crw.host.protocol import NOTIFICATION_METHODS  # noqa: E402
from crw.host.sim.process import launch_sim, stop_sim  # noqa: E402
from crw.host.websocket import WebSocketTransport, websocket_client  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")
SCHEMA = {"type": "object", "required": ["verdict"], "properties": {"verdict": {"enum": ["ok"]}}}


def cpu(pid: int) -> tuple[float, float]:
    """User and system CPU seconds of process `pid`."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) / TICKS, int(fields[12]) / TICKS


class Client:
    """Requests by id over one transport; the threads whose turn completed."""

    def __init__(self, transport: WebSocketTransport) -> None:
        self.transport = transport
        self.sent = 0
        self.answers: dict[int, trio.MemorySendChannel[dict[str, Any]]] = {}
        self.ended: dict[str, trio.Event] = {}

    async def read(self) -> None:
        while True:
            message = await self.transport.receive()
            if "id" in message and "method" not in message:
                self.answers.pop(message["id"]).send_nowait(message)
            elif message.get("method") == "turn/completed":
                self.turn_ended(message["params"]["threadId"]).set()

    def turn_ended(self, thread_id: str) -> trio.Event:
        return self.ended.setdefault(thread_id, trio.Event())

    async def request(self, method: str, params: dict[str, Any]) -> Any:
        self.sent += 1
        send, receive = trio.open_memory_channel[dict[str, Any]](1)
        self.answers[self.sent] = send
        await self.transport.send({"id": self.sent, "method": method, "params": params})
        answer = await receive.receive()
        if "error" in answer:
            raise RuntimeError(f"{method}: {answer['error']}")
        return answer["result"]


async def client_of(socket: Path, ignore: frozenset[str]) -> Client:
    transport = await websocket_client(await trio.open_unix_socket(str(socket)), "localhost")
    transport.ignore = ignore
    return Client(transport)


def spawn_message(packet: Path, name: str) -> str:
    """A spawn message of a call's shape and size (bench/scale.py's are ~940 bytes)."""
    work = f"{packet.parent}/calls/{name}"
    return (
        f"crw-flow-op: {name}/t1-a1\nCRW-ROLE: explorer\n\n"
        "Your shell starts in a directory that is NOT your workspace. "
        f"Your workspace is {work}: run every command with workdir {work} and edit "
        f"only by absolute paths under {work}.\n"
        f"Read the task packet {packet} in full and follow it exactly. "
        "You are a leaf subagent: never spawn agents.\n"
        "Your final message is exactly the JSON object the packet names, and nothing else."
    )


async def drive(where: Path, host: int, socket: Path, calls: int, pool: int) -> tuple[float, ...]:
    packet = where / "packet.md"
    contract = json.dumps(SCHEMA, indent=2)
    packet.write_text(f"# Task\nDo it.\n\n## Output contract\n```json\n{contract}\n```\n")
    async with trio.open_nursery() as nursery:
        owner_client = await client_of(socket, NOTIFICATION_METHODS)
        run_client = await client_of(socket, NOTIFICATION_METHODS - FOLLOWED)
        for client in (owner_client, run_client):
            nursery.start_soon(client.read)
            info = {"name": "host_load", "title": "host_load", "version": "0"}
            # As crw's clients do (`HostClient.initialize`): the host sends neither
            # client what it would drop unread.
            opt_out = {"optOutNotificationMethods": sorted(client.transport.ignore)}
            await client.request("initialize", {"clientInfo": info, "capabilities": opt_out})
            await client.transport.send({"method": "initialized"})
        await owner_client.request("sim/script", {"match": {}, "behaviour": {"seconds": 0}})
        owner = (await owner_client.request("sim/startOwner", {}))["threadId"]
        hold = {"match": {"marker": "owner/*"}, "behaviour": {"seconds": 10**9}}
        await owner_client.request("sim/script", hold)
        text = {"type": "text", "text": "crw-flow-op: owner/t1-a1\nGo.", "text_elements": []}
        await owner_client.request("turn/start", {"threadId": owner, "input": [text]})
        await run_client.request("thread/resume", {"threadId": owner, "excludeTurns": True})
        limiter = trio.CapacityLimiter(pool)

        async def call(i: int) -> None:
            async with limiter:
                message = spawn_message(packet, f"n{i:05d}.1")
                params = {"parentThreadId": owner, "agentType": "explorer", "message": message}
                agent = (await owner_client.request("sim/spawnAgent", params))["agentId"]
                await run_client.turn_ended(agent).wait()
                read = {"threadId": agent, "includeTurns": True}
                await run_client.request("thread/read", read)
                if i % 33 == 0:
                    listing = {"sourceKinds": ["subAgentThreadSpawn"], "limit": 100}
                    await run_client.request("thread/list", listing)
                await owner_client.request("sim/closeAgent", {"target": agent})

        before = cpu(host)
        async with trio.open_nursery() as calls_nursery:
            for i in range(calls):
                calls_nursery.start_soon(call, i)
        after = cpu(host)
        nursery.cancel_scope.cancel()
    return before + after


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--calls", type=int, default=1500)
    parser.add_argument("--pool", type=int, default=8)
    args = parser.parse_args()
    where = Path(tempfile.mkdtemp(prefix="crw-host-load-"))
    try:
        (where / "home").mkdir()
        host = launch_sim(where / "s.sock", where / "home", where / "host.log")
        try:
            user0, sys0, user1, sys1 = trio.run(
                drive, where, host.pid, where / "s.sock", args.calls, args.pool
            )
        finally:
            stop_sim(host)
    finally:
        shutil.rmtree(where, ignore_errors=True)
    per = 1000 / args.calls
    figures = {
        "calls": args.calls,
        "host_user_s_per_1000": round((user1 - user0) * per, 3),
        "host_sys_s_per_1000": round((sys1 - sys0) * per, 3),
        "load": Path("/proc/loadavg").read_text().split()[0],
    }
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
