"""The `crw flow hook` commands in the command tree (`app.py` registers the group).

The `crw flow hook spawn` Codex runs before each tool call never gets here
(`hook.py`'s fast path takes any arguments); the tree shows its `--help`.
"""

from __future__ import annotations

from typing import Annotated

from cyclopts import App, Parameter

from crw.cli.params import Json, State

hook = App(
    name="hook",
    help="The spawn hook Codex runs before the owner's tool calls: install it, or run it.",
)


@hook.command
def spawn(*, state: State = None) -> int:
    """Decide a tool call as a Codex PreToolUse command hook: the call as JSON on
    stdin, the decision as JSON on stdout (nothing for a call left alone).

    Always exit 0: an input it cannot read (over 4 MiB, not strict JSON) and an
    argument other than --state are warnings on stderr, and the call goes ahead."""
    from crw.cli.owner.hook import spawn_command

    return spawn_command(state)


@hook.command
def install(
    *,
    codex_home: Annotated[str | None, Parameter(name="--codex-home")] = None,
    host: str | None = None,
    state: State = None,
    json: Json = False,
) -> int:
    """Write the spawn hook into $CODEX_HOME/config.toml and record its trust from a
    running app-server's hooks/list.

    Exit 0 once the hook is there and trusted, 1 when it is not trusted (the
    warning says why and what to do).

    Parameters
    ----------
    codex_home
        The codex home whose config.toml gets the hook (default: $CODEX_HOME, else ~/.codex).
    host
        The app-server to read the hook's trust from: unix:PATH, ws://127.0.0.1:PORT, or
        codex (a private one on that codex home). Default: the codex daemon's socket.
    state
        The state directory the hook reads (default: $CRW_STATE, else .crw/ at the root
        of the repository the owner thread works in).
    """
    from crw.cli.owner.hook_install import install_command

    return install_command(codex_home=codex_home, host=host, state=state, json=json)
