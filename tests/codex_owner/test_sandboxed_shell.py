"""What `crw flow start`'s host probe makes of a shell that may open no socket, as
the owner's shell in codex's workspace-write sandbox without network access."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from crw.host.probe import probe_host
from crw.host.uri import HostUri


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_shell_that_may_open_no_socket_is_an_unreachable_host(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: FACTS-1 (host_reachable warns; the start is not a traceback). Trio leaves
    the wakeup socketpair it could not set up unclosed: its warning is ignored."""

    def forbidden(*_: object) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(socket.socket, "setsockopt", forbidden)
    probe = probe_host(HostUri("unix", str(tmp_path / "app-server.sock")), "owner", tmp_path)
    assert probe.error == (
        f"cannot open a socket here to reach the host unix:{tmp_path / 'app-server.sock'}: "
        "[Errno 1] Operation not permitted"
    )
