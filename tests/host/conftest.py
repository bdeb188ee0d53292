"""Fixtures for the real Codex app-server run offline against the mock model.

Tests that run the real binary are marked `codex` (`pytest -m codex` selects
them, `-m "not codex"` skips them); they run by default.
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
