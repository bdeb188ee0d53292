"""The host's errors, apart from the transport and the client that raise them:
the host cannot be reached (`HostUnavailable`), or refused a request
(`HostRequestError`, and what its words say: `unknown_thread`).

What talks to the host, and what only tells its faults apart (a run process
before it connects), imports these without the WebSocket framing (wsproto and h11)
that `crw.host.websocket` brings, or the client; `crw.host.transport` re-exports
the first two.
"""

from __future__ import annotations

from typing import Any

from crw.errors import CrwError


class HostError(CrwError):
    """Something went wrong talking to the host."""


class HostUnavailable(HostError):
    """The host cannot be reached, or the connection to it is gone."""


class HostRequestError(HostError):
    """The host answered a request with a JSON-RPC error."""

    def __init__(self, method: str, code: int | None, message: str, data: Any = None) -> None:
        self.method, self.code, self.message, self.data = method, code, message, data
        line = " ".join(message.split()) or "no message"
        super().__init__(f"the host refused {method}: {line} (code {code})")

    @classmethod
    def from_wire(cls, method: str, error: Any) -> HostRequestError:
        if not isinstance(error, dict):
            return cls(method, None, str(error))
        code = error.get("code")
        return cls(
            method,
            code if isinstance(code, int) else None,
            str(error.get("message", "")),
            error.get("data"),
        )


_UNKNOWN_THREAD = ("thread not loaded: ", "thread not found: ", "no rollout found for thread id ")
"""How codex words "there is no such thread", per method (thread/read says not loaded)."""


def unknown_thread(err: HostRequestError) -> bool:
    """The host answered that the thread does not exist (not that it cannot answer now)."""
    return err.code == -32600 and err.message.startswith(_UNKNOWN_THREAD)
