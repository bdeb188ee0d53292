"""Counting what a test's code asks of the `os` module."""

from __future__ import annotations

import os
from typing import Any

import pytest


def os_calls(monkeypatch: pytest.MonkeyPatch, *names: str) -> list[str]:
    """The names of the `os` functions `names` called from now on, in order (each
    call passed through to the real one)."""
    calls: list[str] = []
    for name in names:
        original = getattr(os, name)

        def counted(*args: Any, _name: str = name, _original: Any = original) -> Any:
            calls.append(_name)
            return _original(*args)

        monkeypatch.setattr(os, name, counted)
    return calls
