"""`crw host sim serve --socket PATH`: the simulated host as a shared app-server.

Serves WebSocket over a unix socket until SIGINT, SIGTERM or SIGHUP (its terminal
closed), like `codex app-server --listen unix://PATH`. A socket file no server
answers on is stale and removed first; one a live server answers on is refused.
"""

from __future__ import annotations

import errno
import signal
import socket as _socket
import stat
import sys
import tempfile
from pathlib import Path
from types import FrameType

import trio

from crw.errors import RefusedError
from crw.host.sim.catalog import Catalog
from crw.host.sim.connection import serve_unix
from crw.host.sim.server import open_sim_host
from crw.private import make_dirs


def serve_command(socket: Path, codex_home: Path | None, models: str | None = None) -> int:
    """Serve a fresh simulated host on `socket`; its rollout files go under
    `codex_home` (default: a new temporary directory, removed when it stops);
    `models`, a comma-separated catalog, makes it list those models and refuse spawns as codex does
    (`crw.host.sim.catalog`). Prints `listening on unix:<path>` once it listens.
    Returns 0 when stopped by a signal.

    Raises:
        RefusedError: a live server already listens on `socket`, or it cannot be bound.
    """
    path = socket.absolute()
    _clear_stale(path)
    stop = _Stop()
    if codex_home is not None:
        error = _serve_in(path, codex_home, models, stop)
    else:
        error = _serve_in_temporary_home(path, models, stop)
    if error is not None:
        raise RefusedError(f"cannot listen on unix:{path}: {error.strerror or error}")
    return 0


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
"""The signals that stop the server: each removes a temporary home on the way out."""


class _Stopped(Exception):
    """A stop signal came while no trio receiver listened (before or after serving)."""


class _Stop:
    """The Python handler of the stop signals outside trio's receiver: the first
    raises `_Stopped`, so the temporary home's `with` removes it; any later one, or
    any once the receiver took one, is ignored while the home is being removed."""

    def __init__(self) -> None:
        self.stopping = False

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        if not self.stopping:
            self.stopping = True
            raise _Stopped


def _serve_in_temporary_home(path: Path, models: str | None, stop: _Stop) -> OSError | None:
    """Serve in a home of its own, removed however the server stops but SIGKILL."""
    previous = {number: signal.signal(number, stop) for number in STOP_SIGNALS}
    try:
        with tempfile.TemporaryDirectory(
            prefix="crw-sim-home-", ignore_cleanup_errors=True
        ) as made:
            return _serve_in(path, Path(made), models, stop)
    except _Stopped:
        return None
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def _serve_in(path: Path, home: Path, models: str | None, stop: _Stop) -> OSError | None:
    make_dirs(home)
    names = tuple(name.strip() for name in (models or "").split(",") if name.strip())
    catalog = Catalog.of(names, home) if models is not None else None
    return trio.run(_serve, path, home, catalog, stop)


def _clear_stale(path: Path) -> None:
    """Remove a socket file no server answers on; refuse a live one, or a path
    that is not a socket (it is not ours to remove)."""
    if not path.exists():
        return
    if not stat.S_ISSOCK(path.stat().st_mode):
        raise RefusedError(f"unix:{path} exists and is not a socket; choose another --socket")
    probe = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        probe.connect(str(path))
    except OSError as err:
        if err.errno not in (errno.ECONNREFUSED, errno.ENOENT):
            raise RefusedError(f"cannot check unix:{path}: {err.strerror}") from err
        path.unlink(missing_ok=True)
        return
    finally:
        probe.close()
    raise RefusedError(
        f"unix:{path} is in use by a live server; stop it or choose another --socket"
    )


async def _serve(path: Path, home: Path, catalog: Catalog | None, stop: _Stop) -> OSError | None:
    """Serve until a signal; the error binding the socket, if it could not."""
    with trio.open_signal_receiver(*STOP_SIGNALS) as signals:
        async with open_sim_host(home, catalog=catalog) as host, trio.open_nursery() as nursery:
            try:
                await nursery.start(serve_unix, host, path)
            except OSError as err:
                return err
            print(f"listening on unix:{path}", flush=True, file=sys.stdout)
            async for _ in signals:
                stop.stopping = True  # a signal after the receiver closes is ignored
                nursery.cancel_scope.cancel()
                break
    return None
