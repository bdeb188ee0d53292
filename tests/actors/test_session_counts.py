"""What a plain session call costs the host: the requests a call answered at its
first turn makes, counted (never timed). The harness is `test_session_run`'s."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from trio.testing import MockClock

from crw.actors.host_reader import HostReader
from crw.host.protocol import Thread
from tests.actors.test_session_run import harness, kinds


async def test_a_turn_the_bind_read_shows_ended_is_harvested_without_another_read(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: BIND-6, HARV-1, ATT-1, DISP-25: the bind reads the reported subagent;
    when that read shows the marker turn completed (an instant turn), the harvest
    takes the answer from it, and the marker index learns the subagent's marker
    from it (the look for strays of the bound attempt reads only the others): one
    thread/read of each subagent for its whole call (up to four before: the bind's, the
    index's, the stray look's and the harvest's)."""
    reads: Counter[str] = Counter()
    read = HostReader.read

    async def counted(self: HostReader, thread_id: str) -> Thread:
        reads[thread_id] += 1
        return await read(self, thread_id)

    monkeypatch.setattr(HostReader, "read", counted)
    async with harness(tmp_path) as h:
        await h.script({"marker": "*"}, seconds=0)
        state, rows = await h.go()
    assert state == "ended"
    assert kinds(rows, "review.1")[-1] == "completed"
    assert {thread: reads[thread] for thread in h.owner.spawned} == {
        thread: 1 for thread in h.owner.spawned
    }
