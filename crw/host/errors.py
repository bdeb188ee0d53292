"""The host's errors, apart from the transport that raises most of them.

What talks to the host, and what only tells its faults apart (a run process
before it connects), imports these without the WebSocket framing (wsproto and h11)
that `crw.host.transport` brings; that module re-exports them.
"""

from __future__ import annotations

from crw.errors import CrwError


class HostError(CrwError):
    """Something went wrong talking to the host."""


class HostUnavailable(HostError):
    """The host cannot be reached, or the connection to it is gone."""
