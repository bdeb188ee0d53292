"""The real codex app-server runs here too (the `codex` marker, as in tests/host),
each test on an empty HOME as there (`own_home`, tests/host/conftest.py): at a
thread's first turn codex runs the user's login shell to snapshot its environment,
and the developer's ~/.profile and ~/.bashrc (here pyenv's rehash, which loops on
`sleep 0.1` for up to 60 s while its lock is held) ran beside the test; a rehash
killed with the test's codex leaves its lock held, and every later login shell on
the machine then waits out its 60 s. docs/host-testing.md, "The shell snapshot"."""

from __future__ import annotations

import pytest

from tests.host.conftest import empty_home, own_home

__all__ = ["empty_home", "own_home"]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "codex: runs the real codex app-server offline against the mock model"
    )
