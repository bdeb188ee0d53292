"""What every test gets, whichever xdist worker runs it.

The suite runs on pytest-xdist workers (`make test`): each test keeps its own
state in `tmp_path`, its own CODEX_HOME, sockets in fresh `/tmp/crw-sock-*`
directories and ports the kernel picks, so an ordinary test needs nothing more.
`autojump_clock` is pytest-trio's, made to hold its jumps while a worker thread
works (tests/mock_clock.py).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import trio
from trio.testing import MockClock

from tests.mock_clock import holding_jumps

pytest_plugins = ["tests.drills.table", "tests.xdist_groups"]


@pytest.fixture
def autojump_clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[MockClock]:
    """MockClock(autojump_threshold=0) that takes no virtual time for a thread's work."""
    clock = MockClock(autojump_threshold=0)
    monkeypatch.setattr(trio.to_thread, "run_sync", holding_jumps(clock, trio.to_thread.run_sync))
    yield clock
