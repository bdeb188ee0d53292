"""`crw flow hook install [--codex-home DIR] [--host URI] [--state DIR] [--json]`.

Writes the spawn hook into `$CODEX_HOME/config.toml` (once: an install that finds
the hook there writes none again; an entry with another command, say another
venv's or `--state`, is updated to this one, old and new shown) and records its
trust from the `hooks/list` of an app-server on that CODEX_HOME: `--host URI`
(`codex` starts a private one for the purpose), else the codex daemon's socket when
it is there. A config.toml that is a symbolic link is written through, onto its
target. Exit 0 once the hook is there and trusted; 1 when it is there but not
trusted (the reason and the fix), or the file cannot be written (one line; when
its hooks are inline tables, the entry to add by hand as TOML on stdout); 2 when
the config file cannot be read, or not as TOML.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from crw.binding.install import (
    ByHand,
    crw_command,
    read_config,
    spawn_hooks,
    with_command,
    with_hook,
    with_trust,
    write_config,
)
from crw.cli.output import emit, say
from crw.host.uri import HostUri, default_session_host, parse_host_uri

TRUSTED = "trusted"


@dataclass
class Installed:
    config: Path
    command: str
    added: bool = False
    replaced: list[str] = field(default_factory=list)
    target: Path | None = None
    key: str | None = None
    trusted: bool = False
    warnings: list[str] = field(default_factory=list)


def install_command(
    *, codex_home: str | None, host: str | None, state: str | None, json: bool
) -> int:
    home = Path(codex_home or os.environ.get("CODEX_HOME") or Path.home() / ".codex").absolute()
    uri = parse_host_uri(host) if host else default_session_host({"CODEX_HOME": str(home)})
    try:
        installed = install_hook(home, uri, state, given_host=host is not None)
    except ByHand as refused:
        if not json:
            say(refused.entry.rstrip("\n"))
        refused.members = {"config": str(home / "config.toml"), "entry": refused.entry}
        raise
    payload: dict[str, Any] = {
        "config": str(installed.config),
        "command": installed.command,
        "added": installed.added,
        "replaced": installed.replaced,
        "target": str(installed.target) if installed.target else None,
        "key": installed.key,
        "trusted": installed.trusted,
        "warnings": installed.warnings,
    }
    verb = "added to" if installed.added else "updated in" if installed.replaced else "already in"
    lines = [f"the spawn hook is {verb} {installed.config}: {installed.command}"]
    lines += [f"  was: {old}" for old in installed.replaced]
    if installed.target is not None:
        lines.append(f"  written through the link to {installed.target}")
    lines.append(f"  trusted: {'yes' if installed.trusted else 'no'}")
    lines += [f"  warning: {warning}" for warning in installed.warnings]
    emit(json, payload, "\n".join(lines))
    return 0 if installed.trusted else 1


def install_hook(home: Path, uri: HostUri, state: str | None, *, given_host: bool) -> Installed:
    """Write the hook when it is not there (or update an entry with another
    command), then trust it through the host `uri` (unless no host was given and
    the daemon's socket is not there)."""
    config = read_config(home / "config.toml")
    present = spawn_hooks(config.data)
    installed = Installed(config.path, crw_command(state))
    installed.replaced = list(dict.fromkeys(c for c in present if c != installed.command))
    text = None
    if not present:
        text, installed.added = with_hook(config, installed.command), True
    elif installed.replaced:
        text = with_command(config, installed.replaced, installed.command)
    if text is not None:
        written = write_config(config.path, text)
        installed.target = written if config.path.is_symlink() else None
    if not given_host and not Path(uri.target).exists():
        installed.warnings.append(unanswered(uri, home))
        return installed
    trio.run(trust, installed, uri, home)
    return installed


def unanswered(uri: HostUri, home: Path) -> str:
    """The warning of an install that asks no host: none was given, and the daemon's
    socket is not there."""
    return (
        f"not trusted: no app-server answers on {uri}; start codex on {home} and install "
        "again, or pass --host unix:PATH (a running app-server) or --host codex"
    )


async def trust(
    installed: Installed,
    uri: HostUri,
    home: Path,
    also: Callable[[Any], Awaitable[None]] | None = None,
) -> None:
    """Record the hook's trust as the host `uri` lists it (on `home`); `also` asks
    the same connection more, first."""
    from crw.host.connect import connect_host
    from crw.host.transport import HostError

    env = {name: value for name, value in os.environ.items() if not name.startswith("CODEX_")}
    try:
        async with connect_host(
            uri, env=env | {"CODEX_HOME": str(home)}, follows=frozenset()
        ) as client:
            if also is not None:
                await also(client)
            listed = await _listed(client, installed)
            if listed is None:
                return
            installed.key = listed["key"]
            if listed.get("trustStatus") != TRUSTED:
                config = read_config(installed.config)
                write_config(config.path, with_trust(config, listed["key"], listed["currentHash"]))
                listed = await _listed(client, installed) or {}
            installed.trusted = listed.get("trustStatus") == TRUSTED
            if not installed.trusted:
                installed.warnings.append(
                    f"the host {uri} still reads the hook as {listed.get('trustStatus')}; "
                    "trust it in codex (/hooks)"
                )
    except HostError as err:
        installed.warnings.append(f"not trusted: {err}")


async def _listed(client: Any, installed: Installed) -> dict[str, Any] | None:
    """The host's `hooks/list` entry of the installed hook, or None (with a warning)."""
    answer = await client.request("hooks/list", {"cwds": [str(Path.cwd())]})
    for entry in answer.get("data", []):
        for hook in entry.get("hooks", []):
            mine = Path(str(hook.get("sourcePath"))) == installed.config
            if mine and hook.get("command") == installed.command:
                found: dict[str, Any] = hook
                return found
    installed.warnings.append(
        f"not trusted: the host does not list the hook of {installed.config}; "
        "is it running on that CODEX_HOME?"
    )
    return None
