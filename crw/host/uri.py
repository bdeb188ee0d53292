"""Host URIs, as run.json records them (ARCHITECTURE.md, Processes and commands).

- `unix:PATH`: a shared app-server on a unix socket (WebSocket framing);
- `ws://127.0.0.1:PORT`: a shared app-server on loopback (WebSocket framing);
- `codex`: a private `codex app-server` child over stdio (JSON lines), for the
  app-server backend only.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from crw.errors import InputError, RefusedError

_WS = re.compile(r"^ws://(127\.0\.0\.1|localhost|\[::1\]):(\d{1,5})/?$")


@dataclass(frozen=True)
class HostUri:
    kind: Literal["unix", "ws", "codex"]
    target: str
    """The socket path for unix, the URL for ws, empty for codex."""

    def __str__(self) -> str:
        return {"unix": f"unix:{self.target}", "ws": self.target, "codex": "codex"}[self.kind]


def parse_host_uri(text: str) -> HostUri:
    """Parse a `--host` value; a malformed one is an input error naming the forms."""
    forms = "use unix:PATH, ws://127.0.0.1:PORT or codex"
    if text == "codex":
        return HostUri("codex", "")
    if text.startswith("unix:"):
        path = text.removeprefix("unix:").removeprefix("//")
        if not path:
            raise InputError(f'--host "{text}" names no socket path; {forms}')
        return HostUri("unix", str(Path(path).absolute()))
    match = _WS.match(text)
    if match and 0 < int(match.group(2)) < 65536:
        return HostUri("ws", text.rstrip("/"))
    raise InputError(f'--host "{text}" is not a host URI; {forms} (loopback only)')


def default_session_host(environ: dict[str, str] | os._Environ[str]) -> HostUri:
    """A session run's default host: the socket of `codex app-server daemon`."""
    home = environ.get("CODEX_HOME") or str(Path.home() / ".codex")
    return HostUri("unix", str(Path(home) / "app-server-control" / "app-server-control.sock"))


def session_host(text: str | None, environ: dict[str, str] | os._Environ[str]) -> HostUri:
    """The host of a session run: shared with the owner, never a private child."""
    uri = parse_host_uri(text) if text else default_session_host(environ)
    if uri.kind == "codex":
        raise RefusedError(
            'host "codex" is a private app-server child, and a session run must share '
            "its owner's host; pass --host unix:PATH or ws://127.0.0.1:PORT, "
            "or use --backend app-server"
        )
    return uri
