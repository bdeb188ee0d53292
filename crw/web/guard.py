"""Who may read and who may write: the per-server token, the same-origin check
and the loopback rule, decided from a request's parts (pure).

Reading (GET) is answered only to a loopback client whose Host is the server's
own (a page of another site that rebinds its name to 127.0.0.1 names another
Host). Writing (POST) needs that, the server's token (a header or a form field)
and an Origin, or failing one a Referer, of the server's own origin: a page of
another origin can neither read the token nor pass the check.
"""

from __future__ import annotations

import ipaddress
import secrets
from dataclasses import dataclass, field
from urllib.parse import urlsplit

TOKEN_HEADER = "x-crw-token"
TOKEN_FIELD = "token"


def new_token() -> str:
    """A fresh token, 128 bits, URL-safe."""
    return secrets.token_urlsafe(16)


@dataclass
class Guard:
    """The server's token and the origins it answers as (set once it is bound)."""

    token: str = field(default_factory=new_token)
    origins: set[str] = field(default_factory=set)
    loopback_only: bool = True

    def bound(self, host: str, port: int) -> None:
        """The server listens on `host`:`port`: its origins are that and the
        loopback names a browser on this machine may use for it."""
        shown = f"[{host}]" if ":" in host else host
        names = {shown, "127.0.0.1", "localhost", "[::1]"}
        self.origins = {f"http://{name}:{port}" for name in names}

    def knows(self, token: str | None) -> bool:
        """Whether `token` is this server's."""
        return token is not None and secrets.compare_digest(token.encode(), self.token.encode())

    def refuses_read(self, client: str | None, host_header: str | None) -> str | None:
        """Why a GET is refused (None: answered)."""
        if self.loopback_only and not is_loopback(client):
            return "this server answers the loopback only"
        if self.origins and f"http://{host_header}" not in self.origins:
            return "the Host is not this server's"
        return None

    def refuses_write(
        self,
        client: str | None,
        host_header: str | None,
        origin: str | None,
        referer: str | None,
        token: str | None,
    ) -> str | None:
        """Why a POST is refused (None: allowed)."""
        read = self.refuses_read(client, host_header)
        if read is not None:
            return read
        if not self.knows(token):
            return "a write needs this server's token (the one in the URL it printed)"
        if origin is None and referer:
            parts = urlsplit(referer)
            origin = f"{parts.scheme}://{parts.netloc}"
        if origin is None or origin not in self.origins:
            return "a write must come from this server's own pages (same origin)"
        return None


def is_loopback(host: str | None) -> bool:
    """Whether `host` is a loopback address (or `localhost`)."""
    if host is None:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
