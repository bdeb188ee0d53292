"""Connecting to a host by its URI: a shared app-server over WebSocket, or a
private `codex app-server` child over stdio (ARCHITECTURE.md, Processes and
commands). The connection's client is `crw.host.client.HostClient`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
from collections.abc import AsyncIterator, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import trio

from crw.host.errors import HostUnavailable
from crw.host.uri import HostUri

if TYPE_CHECKING:
    from crw.host.client import HostClient
    from crw.host.transport import Transport

CONNECT_TIMEOUT = 10.0
"""How long opening a socket and its WebSocket upgrade may take."""
CHILD_EXIT_GRACE = 5.0
"""How long a codex child may take to exit once its stdin is closed."""
CODEX_BIN_VARIABLE = "CRW_CODEX_BIN"
"""The environment variable naming the codex binary when `--codex-bin` does not."""
INSTALL_CODEX = "pip install openai-codex-cli-bin==0.163.0, or pass --codex-bin PATH"


@asynccontextmanager
async def connect_host(
    uri: HostUri,
    *,
    codex_bin: str | None = None,
    env: Mapping[str, str] | None = None,
    stderr: Path | None = None,
    follows: frozenset[str] | None = None,
) -> AsyncIterator[HostClient]:
    """An initialized client of the host `uri`, closed (and a codex child stopped)
    when the block exits.

    Args:
        codex_bin: the codex binary for `codex` (see `codex_binary`).
        env: the whole environment of a `codex` child (None: this process's).
        stderr: the file a `codex` child's stderr is appended to (None: discarded).
        follows: the only notifications the client will subscribe to; the host is
            asked not to send it the others (None: it sends them all; `open_client`).

    Raises:
        HostUnavailable: the host cannot be reached or started; one line naming
            `uri` and what to check.
    """
    async with AsyncExitStack() as stack:
        if uri.kind == "codex":
            transport = await stack.enter_async_context(_codex_child(codex_bin, env, stderr))
        else:
            transport = await _enter_websocket(stack, uri)
        # The client and its protocol, as the framing, once the host is reached: a
        # run process writes its started row before it connects, and a start's
        # probe, or a run, that finds no host never loads them.
        from crw.host.client import open_client

        try:
            client = await stack.enter_async_context(
                open_client(transport, name=str(uri), follows=follows)
            )
        except HostUnavailable as err:
            where = f"; its stderr is in {stderr}" if uri.kind == "codex" and stderr else ""
            raise HostUnavailable(f"the host {uri} failed the handshake: {err}{where}") from err
        yield client


async def _enter_websocket(stack: AsyncExitStack, uri: HostUri) -> Transport:
    try:
        return await stack.enter_async_context(_websocket(uri))
    except (OSError, HostUnavailable, trio.TooSlowError) as err:
        reason = str(err) or type(err).__name__
        listen = f"unix://{uri.target}" if uri.kind == "unix" else uri.target
        raise HostUnavailable(
            f"cannot reach the host {uri}: {reason}; is an app-server listening there "
            f"(codex app-server --listen {listen})?"
        ) from err


async def _open_stream(uri: HostUri) -> tuple[trio.SocketStream, str]:
    """The socket of `uri`, and the Host header its WebSocket upgrade names."""
    if uri.kind == "unix":
        return await trio.open_unix_socket(uri.target), "localhost"
    url = urlsplit(uri.target)
    assert url.hostname is not None and url.port is not None  # parse_host_uri checked
    return await trio.open_tcp_stream(url.hostname, url.port), url.netloc


@asynccontextmanager
async def _websocket(uri: HostUri) -> AsyncIterator[Transport]:
    """A WebSocket client connection on a unix socket or loopback TCP; its socket
    is closed when the block exits, whoever ended the connection."""
    with trio.fail_after(CONNECT_TIMEOUT):
        stream, host = await _open_stream(uri)
    # The framing (wsproto, h11) is imported once a socket is open: a run process
    # writes its started row before it connects, and no host costs no framing.
    from crw.host.client import CLOSE_TIMEOUT
    from crw.host.websocket import websocket_client

    try:
        with trio.fail_after(CONNECT_TIMEOUT):
            # A peer that closes before the upgrade, or rejects it, fails it; one
            # that never answers, the deadline does.
            transport = await websocket_client(stream, host, "/", name=str(uri))
        try:
            yield transport
        finally:
            with trio.move_on_after(CLOSE_TIMEOUT, shield=True):
                await transport.aclose()
    finally:
        with trio.CancelScope(shield=True):
            await stream.aclose()


@asynccontextmanager
async def _codex_child(
    codex_bin: str | None, env: Mapping[str, str] | None, stderr: Path | None
) -> AsyncIterator[Transport]:
    """A private `codex app-server` child over its stdio; never outlives the block."""
    from crw.host.transport import JsonLinesTransport  # with the framing, as _websocket

    binary = codex_binary(codex_bin)
    try:
        log = os.open(stderr, os.O_WRONLY | os.O_APPEND | os.O_CREAT) if stderr else None
    except OSError as err:
        raise HostUnavailable(f"cannot open the host's log {stderr}: {err.strerror}") from err
    try:
        try:
            process = await trio.lowlevel.open_process(
                [binary, "app-server"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL if log is None else log,
                env=None if env is None else dict(env),
                start_new_session=True,  # its group: a launcher's child is killed with it
            )
        finally:
            if log is not None:
                os.close(log)
    except OSError as err:
        raise HostUnavailable(
            f"cannot start the host codex ({binary} app-server): {err}; {INSTALL_CODEX}"
        ) from err
    try:
        assert process.stdin is not None and process.stdout is not None
        stdio = trio.StapledStream(process.stdin, process.stdout)
        yield JsonLinesTransport(stdio, name="codex app-server")
    finally:
        with trio.CancelScope(shield=True):
            await _stop(process)


async def _stop(process: trio.Process) -> None:
    """Closing stdin stops the server; one that lingers past CHILD_EXIT_GRACE is killed
    with its process group: npm's `codex` is a launcher whose child is the server
    (on a Node without execve), and killing the launcher alone would leave it."""
    for pipe in (process.stdin, process.stdout):
        if pipe is not None:
            await pipe.aclose()
    with trio.move_on_after(CHILD_EXIT_GRACE):
        await process.wait()
    if process.returncode is None:
        # Not reaped yet, so the group is still the child's: its id cannot be reused.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        await process.wait()


def codex_binary(explicit: str | None = None, environ: Mapping[str, str] = os.environ) -> str:
    """The codex binary to run: `explicit` (`--codex-bin`), else `$CRW_CODEX_BIN`,
    else the one bundled by the `openai-codex-cli-bin` package, else `codex` on PATH.

    Raises:
        HostUnavailable: none of them is there; says how to install one.
    """
    if explicit or environ.get(CODEX_BIN_VARIABLE):
        return explicit or environ[CODEX_BIN_VARIABLE]
    try:
        import codex_cli_bin

        return str(codex_cli_bin.bundled_codex_path())
    except (ImportError, OSError):
        found = shutil.which("codex")
    if found is None:
        raise HostUnavailable(f"no codex binary found: {INSTALL_CODEX}")
    return found


def found_codex_binary(explicit: str | None = None) -> str:
    """The binary `codex_binary` names, as exec would find it (a bare name on PATH);
    what a start checks before a run on a private `codex` host exists.

    Raises:
        HostUnavailable: none is named, or the one named is not an executable file.
    """
    binary = codex_binary(explicit)
    found = shutil.which(binary)
    if found is None:
        raise HostUnavailable(
            f"the codex binary {binary} is not an executable file: {INSTALL_CODEX}"
        )
    return found
