"""The simulated host as a shared server: WebSocket over a unix socket, and the
`crw host sim serve` command that runs it until a signal."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio
import trio_websocket

from crw.errors import RefusedError
from crw.host.sim.connection import serve_unix
from crw.host.sim.serve import serve_command
from crw.host.sim.server import open_sim_host
from tests.host.sim.support import RawClient, text_input
from tests.host.ws_peer import TrioWebSocketPeer

REPO = Path(__file__).resolve().parents[3]


async def test_serve_unix_serves_a_websocket_client(tmp_path: Path) -> None:
    path = tmp_path / "sim.sock"
    async with open_sim_host(tmp_path / "home") as host, trio.open_nursery() as nursery:
        listening = await nursery.start(serve_unix, host, path)
        stream = await trio.open_unix_socket(str(path))
        ws = await trio_websocket.wrap_client_stream(
            nursery, stream, "localhost", "/", max_message_size=64 * 1024 * 1024
        )
        client = RawClient(TrioWebSocketPeer(ws))
        await client.initialize()
        await client.request("sim/script", {"match": {}, "behaviour": {"seconds": 0}})
        thread_id = (await client.request("thread/start", {}))["thread"]["id"]
        params = {"threadId": thread_id, "input": text_input("hi")}
        turn = await client.turn_completed(
            (await client.request("turn/start", params))["turn"]["id"]
        )
        await ws.aclose()
        nursery.cancel_scope.cancel()
    assert listening == path
    assert turn["status"] == "completed"
    assert not path.exists()


@contextlib.contextmanager
def _serving(socket_path: Path, home: Path) -> Iterator[subprocess.Popen[str]]:
    """`serve_command` in a child process, killed and reaped by pid at the end."""
    code = (
        "import sys; from pathlib import Path; from crw.host.sim.serve import serve_command; "
        "sys.exit(serve_command(Path(sys.argv[1]), Path(sys.argv[2])))"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", code, str(socket_path), str(home)],
        cwd=REPO,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        yield child
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child.pid, signal.SIGKILL)
        child.wait()
        assert child.stdout is not None
        child.stdout.close()


def _first_line(child: subprocess.Popen[str], timeout: float = 20) -> str:
    assert child.stdout is not None
    ready, _, _ = select.select([child.stdout], [], [], timeout)
    assert ready, "the server printed nothing"
    return child.stdout.readline().strip()


def test_serve_command_replaces_a_stale_socket_and_stops_on_sigterm(tmp_path: Path) -> None:
    path = tmp_path / "s.sock"
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(path))
    stale.close()
    with _serving(path, tmp_path / "home") as child:
        line = _first_line(child)
        os.kill(child.pid, signal.SIGTERM)
        code = child.wait(timeout=20)
    assert line == f"listening on unix:{path}"
    assert code == 0
    assert not path.exists()


def test_serve_command_refuses_a_socket_a_live_server_listens_on(tmp_path: Path) -> None:
    path = tmp_path / "live.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as live:
        live.bind(str(path))
        live.listen(1)
        with pytest.raises(RefusedError) as refused:
            serve_command(path, tmp_path / "home")
    assert str(refused.value) == (
        f"unix:{path} is in use by a live server; stop it or choose another --socket"
    )
    assert "\n" not in str(refused.value)


def test_serve_command_refuses_a_path_that_is_not_a_socket(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("mine")
    with pytest.raises(RefusedError):
        serve_command(path, tmp_path / "home")
    assert path.read_text() == "mine"
