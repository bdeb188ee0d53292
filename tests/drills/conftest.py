"""A drill's record of what it found; tests/drills/table.py makes the table of them."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture
def found(request: pytest.FixtureRequest) -> Iterator[dict[str, Any]]:
    """What the drill found: its test fills `held` (the held reason) and `end`, and
    `point` and `stop` when its parameters do not name them."""
    seen: dict[str, Any] = {}
    yield seen
    request.node.user_properties.append(("drill", seen))
