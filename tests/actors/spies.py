"""Test helpers that count what a run does, never time it. No test here."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pytest


def names_read(monkeypatch: pytest.MonkeyPatch, owner: object, attribute: str) -> list[str]:
    """Patch `owner.attribute`, a function of one path, to call through and note
    the path's name; the names, in call order, as the test goes on. The spy keeps
    the function's `__name__`, so a count of worker-thread hops by the name of the
    function run still counts it."""
    names: list[str] = []
    real = getattr(owner, attribute)

    @functools.wraps(real)
    def noted(path: Path) -> Any:
        names.append(path.name)
        return real(path)

    monkeypatch.setattr(owner, attribute, noted)
    return names
