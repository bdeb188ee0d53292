"""The real codex app-server runs here too (the `codex` marker, as in tests/host)."""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "codex: runs the real codex app-server offline against the mock model"
    )
