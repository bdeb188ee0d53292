"""The real `codex app-server`, offline: its home, its environment, its process.
The binary is the test's (`$CRW_CODEX_BIN`: 0.163.0 and the npm one, tests/codex_bins.py).

Every process started here writes its stdout/stderr to a log file, never to the
test's, and is reaped by pid: closing stdin first (that stops a stdio server),
then SIGTERM, then SIGKILL, each to its process group (its own: npm's `codex` is
a launcher whose child is the server, which a signal to the launcher alone
would leave behind). `Rpc` speaks to it raw over either framing. See
docs/host-testing.md for what was seen running it.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trio

from crw.host.connect import codex_binary as crw_codex_binary
from crw.host.mock_model import CODEX_MODEL as CODEX_MODEL
from crw.host.mock_model import write_codex_home
from crw.host.transport import JsonLinesTransport, Transport
from tests import zygote

"""A model in 0.163.0's bundled catalog: codex takes it offline without the
`Model metadata ... not found` warning, and subagent spawns validate against it."""

WAIT = 20.0
"""No single wait on the real host should come near this; a hang fails the test."""
START_TIMEOUT = 15.0
STOP_TIMEOUT = 5.0


def codex_binary() -> Path:
    """The binary crw would run: `$CRW_CODEX_BIN` (tests/codex_bins.py sets it), else
    the wheel's."""
    return Path(crw_codex_binary())


def codex_home(tmp_path: Path, model_url: str) -> Path:
    """A fresh CODEX_HOME under `tmp_path` whose config points codex at the mock model."""
    return write_codex_home(tmp_path / "codex-home", model_url)


def codex_env(home: Path) -> dict[str, str]:
    """The environment of a codex child: ours, with CODEX_HOME set and no OpenAI
    credentials or codex settings leaking in from the developer's shell."""
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("OPENAI_", "CODEX_"))
    }
    env["CODEX_HOME"] = str(home)
    return env


@dataclass(frozen=True)
class SharedServer:
    """A `codex app-server --listen unix://PATH` child."""

    process: subprocess.Popen[bytes]
    socket_path: Path
    log_path: Path
    started_in: float
    """Seconds from spawn until the socket accepted a connection."""


def crw_on(*args: str, home: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    """`crw ARGS` in `cwd` on the CODEX_HOME `home` (codex_env's, no CRW_ variable
    of this process), its temporary files under `cwd`: forked from the worker's
    server that imported crw once (tests/zygote.py), as `Crw` runs a command."""
    env = {k: v for k, v in codex_env(home).items() if not k.startswith("CRW_")}
    return zygote.run(list(args), env | {"TMPDIR": str(cwd)}, cwd, timeout=60)


async def owner_thread(socket_path: Path, cwd: Path) -> str:
    """A thread started on the shared app-server at `socket_path`: an owner's id."""
    from crw.host.connect import connect_host
    from crw.host.uri import HostUri

    async with connect_host(HostUri("unix", str(socket_path))) as client:
        started = await client.request("thread/start", {"cwd": str(cwd)})
        return str(started["thread"]["id"])


def start_shared_app_server(home: Path, socket_path: Path, log_path: Path) -> SharedServer:
    """Start a shared app-server and wait until its socket accepts.

    The caller reaps it with `reap(server.process)`; `shared_app_server` does both.
    Raises RuntimeError (with the log's tail) when it exits or never listens.
    """
    began = time.monotonic()
    with log_path.open("ab") as log:
        process = subprocess.Popen(
            [str(codex_binary()), "app-server", "--listen", f"unix://{socket_path}"],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            env=codex_env(home),
            start_new_session=True,
        )
    try:
        _wait_until_listening(process, socket_path, log_path)
    except BaseException:
        reap(process)
        raise
    return SharedServer(process, socket_path, log_path, time.monotonic() - began)


def _wait_until_listening(
    process: subprocess.Popen[bytes], socket_path: Path, log_path: Path
) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"codex app-server exited {process.returncode}: {_tail(log_path)}")
        with socket.socket(socket.AF_UNIX) as probe, contextlib.suppress(OSError):
            probe.connect(str(socket_path))
            return
        time.sleep(0.02)
    raise RuntimeError(f"codex app-server never listened on {socket_path}: {_tail(log_path)}")


def _tail(log_path: Path) -> str:
    return log_path.read_text(errors="replace")[-2000:]


def reap(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL after STOP_TIMEOUT, to its process group; returns once
    the pid is reaped."""
    if process.poll() is None:
        _signal_group(process.pid, signal.SIGTERM)
        try:
            process.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            _signal_group(process.pid, signal.SIGKILL)
    process.wait()


def kill(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL to its process group at once; returns once the pid is reaped. For a
    shared server whose test is over: under SIGTERM codex first finishes the turns
    it runs (an owner's turn goes on asking its model and running its commands),
    which `reap` waited out for up to STOP_TIMEOUT. What a killed server leaves
    (its shells' commands, in sessions of their own) is the caller's to reap."""
    if process.poll() is None:
        _signal_group(process.pid, signal.SIGKILL)
    process.wait()


def _signal_group(pid: int, signal_to_send: signal.Signals) -> None:
    """The group of a child not yet reaped (its id cannot have been reused)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal_to_send)


@contextlib.contextmanager
def shared_app_server(home: Path, socket_path: Path, log_path: Path) -> Iterator[SharedServer]:
    """A shared app-server for the block, reaped by pid after it."""
    server = start_shared_app_server(home, socket_path, log_path)
    try:
        yield server
    finally:
        reap(server.process)


@contextlib.asynccontextmanager
async def private_app_server(home: Path, log_path: Path) -> AsyncIterator[JsonLinesTransport]:
    """A private `codex app-server` child over stdio, for the block.

    At exit its stdin is closed (the server stops), then it gets SIGTERM and
    SIGKILL if it lingers; the pid is always reaped, even when the block is
    cancelled.
    """
    with log_path.open("ab") as log:
        process = await trio.lowlevel.open_process(
            [str(codex_binary()), "app-server"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
            env=codex_env(home),
            start_new_session=True,
        )
    assert process.stdin is not None and process.stdout is not None
    transport = JsonLinesTransport(
        trio.StapledStream(process.stdin, process.stdout), name="codex app-server"
    )
    try:
        yield transport
    finally:
        with trio.CancelScope(shield=True):
            await _stop(process, transport)


async def _stop(process: trio.Process, transport: JsonLinesTransport) -> None:
    with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
        await transport.aclose()
    for signal_to_send in (None, signal.SIGTERM, signal.SIGKILL):
        if signal_to_send is not None and process.returncode is None:
            _signal_group(process.pid, signal_to_send)
        with trio.move_on_after(STOP_TIMEOUT):
            await process.wait()
            return


class Rpc:
    """Raw requests and notifications over one transport, read by one task: enough
    to pin the host's behaviour; the product's client is `crw.host.client`."""

    def __init__(self, transport: Transport) -> None:
        self.transport = transport
        self.notes: list[dict[str, Any]] = []
        self._taken: set[int] = set()
        self._ids = itertools.count(1)

    async def call(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """The whole response message: `{"id", "result"}` or `{"id", "error"}`."""
        request_id = next(self._ids)
        await self.transport.send({"id": request_id, "method": method, "params": params})
        with trio.fail_after(WAIT):
            while True:
                message = await self.transport.receive()
                if message.get("id") == request_id and "method" not in message:
                    return message
                self.notes.append(message)

    async def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        response = await self.call(method, params)
        assert "result" in response, response
        result: dict[str, Any] = response["result"]
        return result

    async def until(
        self, method: str, where: Callable[[dict[str, Any]], bool] = lambda _: True
    ) -> dict[str, Any]:
        """The params of the first notification not yet taken that matches."""
        with trio.fail_after(WAIT):
            index = 0
            while True:
                while index < len(self.notes):
                    note = self.notes[index]
                    params: dict[str, Any] = note.get("params", {})
                    fresh = index not in self._taken and note.get("method") == method
                    if fresh and where(params):
                        self._taken.add(index)
                        return params
                    index += 1
                self.notes.append(await self.transport.receive())

    def position(self, method: str, where: Callable[[dict[str, Any]], bool]) -> int:
        """The index of the first received notification that matches."""
        return next(
            i
            for i, note in enumerate(self.notes)
            if note.get("method") == method and where(note.get("params", {}))
        )


async def initialized(rpc: Rpc) -> Rpc:
    client = {"name": "crw-tests", "title": "crw tests", "version": "0"}
    result = await rpc.request(
        "initialize", {"clientInfo": client, "capabilities": {"experimentalApi": True}}
    )
    assert result["codexHome"]
    await rpc.transport.send({"method": "initialized"})
    return rpc
