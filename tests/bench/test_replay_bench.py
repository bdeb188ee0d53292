"""bench/replay.py: what its timings hold."""

from __future__ import annotations

import time
import weakref
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.bench.conftest import load_bench


def test_a_trial_is_timed_without_freeing_the_trial_before(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each trial's read and replay (and its rows as models) are timed while the
    trial before still holds its rows and state: freeing 100,000 rows is no part of
    reading them, and no process that reads its journal once pays it."""
    bench = load_bench("replay", monkeypatch)
    path = tmp_path / "journal.jsonl"
    bench.write_journal(path, 60)
    events: list[str] = []
    made = {"read": 0, "replay": 0}

    def watched(kind: str, made_by: Any) -> Any:
        def make(*args: Any) -> Any:
            made[kind] += 1
            value = made_by(*args)
            weakref.finalize(value, events.append, f"{kind} {made[kind]} freed")
            return value

        return make

    def perf_counter() -> float:
        events.append("clock")
        return time.perf_counter()

    monkeypatch.setattr(bench, "read_journal", watched("read", bench.read_journal))
    monkeypatch.setattr(bench, "replay", watched("replay", bench.replay))
    monkeypatch.setattr(
        bench, "time", SimpleNamespace(perf_counter=perf_counter, process_time=time.process_time)
    )
    bench.measure(path, 3)
    # Each trial reads the clock four times: before the read, after it, after the
    # replay, after the models. From the first to the fourth nothing is freed.
    timed = False
    for n, event in enumerate(events):
        if event == "clock":
            ticks = events[: n + 1].count("clock")
            timed = ticks % 4 != 0
        else:
            assert not timed, f"{event} inside a trial's timings: {events}"
    assert events.count("clock") == 12
    assert {event for event in events if event != "clock"} >= {"read 1 freed", "replay 2 freed"}
