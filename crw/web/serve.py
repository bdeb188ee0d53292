"""`crw flow ui`: serve the web view on Hypercorn's Trio worker until Ctrl-C or
SIGTERM.

It binds first (port 0: any free port), then prints the URL with the token, one
line (with --json one object: url, port, token, host, state_dir), so a caller can
read where it listens before it answers. Bound to the loopback unless --host
names another address (a warning says who else can then reach it; reads are
still answered to loopback clients only, so it is of use only behind a tunnel
or proxy on this machine).
"""

from __future__ import annotations

import contextlib
import json as json_module
import logging
import os
import signal
import sys
import webbrowser
from functools import partial
from pathlib import Path
from typing import Any, cast

import trio

from crw.engine.run.rundir import resolve_state
from crw.errors import InputError
from crw.web.app import Ui, build
from crw.web.guard import Guard, is_loopback

LOOPBACK = "127.0.0.1"
GRACE = 1.0
"""Seconds Hypercorn waits for open requests (event streams) once told to stop."""


def ui_command(*, state: str | None, port: int, host: str, open_browser: bool, json: bool) -> int:
    if not 0 <= port <= 65535:
        raise InputError(f"--port {port} is no port; pass 0 (any free port) to 65535")
    state_dir = resolve_state(state, os.environ, Path.cwd())
    if not is_loopback(host):
        print(
            f"crw: warning: --host {host}: the page is served on an interface other hosts may "
            "reach; it still answers only loopback clients",
            file=sys.stderr,
            flush=True,
        )
    ui = Ui(state_dir=state_dir, guard=Guard(), cwd=Path.cwd())
    with contextlib.suppress(KeyboardInterrupt):
        trio.run(_serve, ui, host, port, open_browser, json)
    return 0


async def _serve(ui: Ui, host: str, port: int, open_browser: bool, json: bool) -> None:
    from hypercorn.config import Config
    from hypercorn.trio import serve
    from hypercorn.typing import ASGIFramework

    config = Config()
    config.bind = [f"[{host}]:{port}" if ":" in host else f"{host}:{port}"]
    config.graceful_timeout = GRACE
    config.accesslog = None
    config.errorlog = logging.getLogger("crw.web")
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_signals, stop)
        binds = await nursery.start(
            partial(serve, cast(ASGIFramework, build(ui)), config, shutdown_trigger=stop.wait)
        )
        bound = int(binds[0].rsplit(":", 1)[1])
        ui.guard.bound(host, bound)
        shown = f"[{host}]" if ":" in host else host
        url = f"http://{shown}:{bound}/?token={ui.guard.token}"
        _announce(url, bound, ui, host, json)
        if open_browser:
            await trio.to_thread.run_sync(webbrowser.open, url)
        await stop.wait()
        nursery.cancel_scope.deadline = trio.current_time() + GRACE + 1


def _announce(url: str, port: int, ui: Ui, host: str, json: bool) -> None:
    print(f"crw flow ui: {url}", flush=True)
    if json:
        payload: dict[str, Any] = {
            "url": url,
            "port": port,
            "token": ui.guard.token,
            "host": host,
            "state_dir": str(ui.state_dir),
        }
        print(json_module.dumps(payload), flush=True)


async def _signals(stop: trio.Event) -> None:
    """Set `stop` at the first SIGINT or SIGTERM."""
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as received:
        async for _ in received:
            stop.set()
            return
