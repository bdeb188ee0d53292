"""The real codex app-server runs here too (the `codex` marker, as in tests/host);
a test that takes `multi_agent` runs once on each multi-agent protocol."""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "codex: runs the real codex app-server offline against the mock model"
    )


@pytest.fixture(params=["v1", "v2"])
def multi_agent(request: pytest.FixtureRequest) -> str:
    """The owner's multi-agent tools (harness.owned_run's `multi_agent`): the run
    speaks the same protocol, as its start reads it from config.toml."""
    protocol: str = request.param
    return protocol
