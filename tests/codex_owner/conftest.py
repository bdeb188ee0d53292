"""The real codex app-server runs here too (the `codex` marker, as in tests/host),
each test on an empty HOME as there (`own_home`, tests/host/conftest.py): at each
thread's first turn, the owner's and every subagent's, codex runs the user's login
shell to snapshot its environment, and the developer's ~/.profile and ~/.bashrc
(here pyenv's rehash, which loops on `sleep 0.1` for up to 60 s while its lock is
held, and a killed one leaves it held) ran beside every test, orphaned.
docs/host-testing.md, "The shell snapshot". A test that takes `multi_agent` runs
once on each multi-agent protocol."""

from __future__ import annotations

import pytest

from tests.host.conftest import empty_home, own_home

__all__ = ["empty_home", "own_home"]


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
