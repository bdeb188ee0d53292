"""Host URIs as `--host` takes them and run.json records them."""

from __future__ import annotations

import re

import pytest

from crw.errors import InputError, RefusedError
from crw.host.uri import default_session_host, parse_host_uri, session_host


@pytest.mark.parametrize(
    ("text", "kind", "shown"),
    [
        ("unix:/tmp/h.sock", "unix", "unix:/tmp/h.sock"),
        ("unix:///tmp/h.sock", "unix", "unix:/tmp/h.sock"),
        ("ws://127.0.0.1:4500", "ws", "ws://127.0.0.1:4500"),
        ("ws://localhost:4500/", "ws", "ws://localhost:4500"),
        ("codex", "codex", "codex"),
    ],
)
def test_host_uri_forms_parse_and_print_back(text: str, kind: str, shown: str) -> None:
    uri = parse_host_uri(text)
    assert (uri.kind, str(uri)) == (kind, shown)


@pytest.mark.parametrize(
    "text", ["unix:", "ws://10.0.0.1:80", "http://127.0.0.1:1", "ws://127.0.0.1:0", "tcp:x"]
)
def test_malformed_host_uri_is_an_input_error_naming_the_forms(text: str) -> None:
    with pytest.raises(InputError, match=re.escape("unix:PATH, ws://127.0.0.1:PORT or codex")):
        parse_host_uri(text)


def test_session_run_refuses_the_private_codex_host() -> None:
    with pytest.raises(RefusedError, match="must share its owner's host"):
        session_host("codex", {})


def test_session_run_defaults_to_the_daemon_control_socket() -> None:
    uri = session_host(None, {"CODEX_HOME": "/h"})
    assert str(uri) == "unix:/h/app-server-control/app-server-control.sock"
    assert default_session_host({"CODEX_HOME": "/h"}) == uri
