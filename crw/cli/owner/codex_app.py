"""The `crw flow codex` commands in the command tree (`app.py` registers the group)."""

from __future__ import annotations

from typing import Annotated

from cyclopts import App, Parameter

from crw.cli.params import Json, State

codex = App(name="codex", help="Set up Codex to own crw flow runs.")


@codex.command
def install(
    *,
    codex_home: Annotated[str | None, Parameter(name="--codex-home")] = None,
    host: str | None = None,
    state: State = None,
    yes: Annotated[bool, Parameter(name="--yes", negative="")] = False,
    json: Json = False,
) -> int:
    """Install the spawn hook, the crw-flow skill and the agent types of the role
    store (<state>/roles.toml) into a codex home, showing what it writes first; then
    trust the hook and have the app-server read the skill.

    Exit 0 once all is there, the hook trusted and the skill listed by the host; 1
    when not (the warnings say why) or nothing was written for want of a yes; 2 when
    config.toml or the role store cannot be read.

    Parameters
    ----------
    codex_home
        The codex home to set up (default: $CODEX_HOME, else ~/.codex).
    host
        The app-server to trust the hook and reload the skills through: unix:PATH,
        ws://127.0.0.1:PORT, or codex (a private one on that codex home). Default: the
        codex daemon's socket.
    yes
        Write without asking (else a terminal is asked; without one nothing is written).
    """
    from crw.cli.owner.codex_install import install_command

    return install_command(codex_home=codex_home, host=host, state=state, yes=yes, json=json)
