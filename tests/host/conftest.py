"""Fixtures for the real Codex app-server run offline against the mock model.

Tests that run the real binary are marked `codex` (`pytest -m codex` selects
them, `-m "not codex"` skips them); they run by default, each with an empty HOME
(`own_home`): codex never runs the developer's login shell set-up.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from crw.host.mock_model import MockModel
from tests.host.codex_env import SharedServer, codex_home, shared_app_server


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "codex: runs the real codex app-server offline against the mock model"
    )


@pytest.fixture(scope="session")
def empty_home() -> Iterator[Path]:
    """An empty directory for HOME, outside pytest's base temporary directory (a
    `crw` fork server started under it must not look like a test's leftover,
    tests/leaks.py), removed at the session's end. codex writes nothing there."""
    with tempfile.TemporaryDirectory(prefix="crw-home-", dir="/tmp") as home:
        yield Path(home)


@pytest.fixture(autouse=True)
def own_home(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Path | None:
    """A `codex` test's HOME: an empty directory (None for the other tests, which
    keep the worker's).

    At a thread's first turn codex runs the user's login shell to snapshot its
    environment (its `shell_snapshot` feature, on by default), and a login shell
    reads ~/.profile and ~/.bashrc, outside the sandbox. With the developer's HOME
    each thread ran their shell set-up, its children orphaned when codex gave up
    on the snapshot (here pyenv's rehash waiting on its lock with `sleep 0.1`:
    two thirds of these tests' CPU). With this HOME the snapshot runs as codex
    ships it, on a login shell that reads /etc/profile alone; the codex children
    and every `crw` the test starts inherit it (codex_env).
    docs/host-testing.md, "The shell snapshot"."""
    if request.node.get_closest_marker("codex") is None:
        return None
    home: Path = request.getfixturevalue("empty_home")
    monkeypatch.setenv("HOME", str(home))
    return home


@pytest.fixture
def c_encoders_built(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """The C JSON encoders built from here on (`json.encoder.c_make_encoder`'s
    calls, each its arguments): `JSONEncoder.encode` builds one a dict it encodes."""
    built: list[object] = []
    make = vars(json.encoder)["c_make_encoder"]
    assert make is not None

    def counting(*args: Any) -> Any:
        built.append(args)
        return make(*args)

    monkeypatch.setattr(json.encoder, "c_make_encoder", counting)
    return built


@pytest.fixture
def mock_model() -> Iterator[MockModel]:
    """A started mock Responses API; stopped, threads joined, after the test."""
    with MockModel() as model:
        yield model


@pytest.fixture
def codex_home_dir(tmp_path: Path, mock_model: MockModel) -> Path:
    """A fresh CODEX_HOME pointing codex at `mock_model`."""
    return codex_home(tmp_path, mock_model.url)


@pytest.fixture
def shared_codex_server(tmp_path: Path, codex_home_dir: Path) -> Iterator[SharedServer]:
    """`codex app-server --listen unix://PATH` on `codex_home_dir`, reaped after the
    test. The socket lives in a short directory: a unix socket path has ~107 bytes."""
    with tempfile.TemporaryDirectory(prefix="crw-sock-", dir="/tmp") as short:
        socket_path = Path(short) / "app-server.sock"
        with shared_app_server(codex_home_dir, socket_path, tmp_path / "app-server.log") as server:
            yield server
