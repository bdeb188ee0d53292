"""`crw flow ui` in the command tree (named there by string: nothing below the
web layer imports it)."""

from __future__ import annotations

from typing import Annotated

from cyclopts import Parameter

from crw.cli.params import Json, State


def ui(
    *,
    state: State = None,
    port: int = 0,
    host: str = "127.0.0.1",
    open_browser: Annotated[bool, Parameter(name="--open", negative="")] = False,
    json: Json = False,
) -> int:
    """Serve a local web view of the runs: each run's calls, rows and timeline,
    live, with the decisions the CLI offers (answer, pause, cancel, resume).

    It prints `crw flow ui: URL` first; the URL holds a per-server token that
    every decision needs. Ctrl-C stops it.

    Parameters
    ----------
    port
        The port to listen on; 0 picks a free one.
    host
        The address to listen on: the loopback unless you name another (a
        warning says so; only loopback clients are answered).
    open_browser
        Open the URL in the default browser.
    json
        Print a JSON object with url, port and token after the line.
    """
    from crw.web.serve import ui_command

    return ui_command(state=state, port=port, host=host, open_browser=open_browser, json=json)
