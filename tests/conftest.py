"""What every test gets, whichever xdist worker runs it.

The suite runs on pytest-xdist workers (`make test`): each test keeps its own
state in `tmp_path`, its own CODEX_HOME, sockets in fresh `/tmp/crw-sock-*`
directories and ports the kernel picks, so an ordinary test needs nothing more.
`autojump_clock` is pytest-trio's, made to hold its jumps while a worker thread
works (tests/mock_clock.py).

Ctrl-C reaches every process a test starts as it reaches a command typed at a
terminal: a suite started in the background (`make test &`, `nohup`, a CI runner's
job) inherits SIGINT ignored, every process it starts would too, and a test that
sends SIGINT (`show --follow`'s Ctrl-C, a bench stopped at its limit) would wait
for a process that never hears it. `pytest_configure` gives SIGINT back its
default handling, which children get at exec.

The run processes and simulated hosts the tests start (`crw.detach.start_crw`)
are forked from the worker's fork server, as `Crw`'s commands are
(tests/zygote.py; `CRW_TEST_COLD=1` starts each fresh).

Hypothesis's `deadline` (200 ms an example) and its `too_slow` health check are
wall-clock bounds: on a loaded machine a property test failed on them
(`test_gate`'s admission order, 220 ms) though nothing was wrong. The suite's
profile has neither; a test that sets its own keeps its own.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator

import pytest
import trio
from hypothesis import HealthCheck, settings
from trio.testing import MockClock

from crw.actors import thread_hop
from tests import zygote
from tests.mock_clock import holding_jumps

pytest_plugins = [
    "tests.drills.table",
    "tests.codex_bins",
    "tests.postgres",
    "tests.leaks",
    "tests.cpu",
]

settings.register_profile("crw", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("crw")


def pytest_configure(config: pytest.Config) -> None:
    """SIGINT handled as in a terminal (the module docstring), in the controller
    and in each xdist worker alike; the detached crw processes the tests start
    forked from the worker's server (tests/zygote.py)."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    zygote.install()


@pytest.fixture
def autojump_clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[MockClock]:
    """MockClock(autojump_threshold=0) that takes no virtual time for a thread's work."""
    clock = MockClock(autojump_threshold=0)
    monkeypatch.setattr(trio.to_thread, "run_sync", holding_jumps(clock, trio.to_thread.run_sync))
    monkeypatch.setattr(thread_hop, "run_sync", holding_jumps(clock, thread_hop.run_sync))
    yield clock
