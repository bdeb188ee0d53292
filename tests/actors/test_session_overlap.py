"""What a session call overlaps with the journal's sync: the next call is admitted
once a call's terminal rows are queued, and the bind's look for strays reads the
host while the bind's rows are synced. The rows and their order stay as they were.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from trio.testing import MockClock

from crw.actors.host_reader import HostReader
from crw.actors.journal_writer import JournalWriter, open_journal_writer
from crw.journal import log
from crw.journal.log import sync_data
from crw.journal.rows import RowModel
from tests.actors import test_session_run as session_run_tests
from tests.actors.test_session_run import harness, kinds

HOLD_S = 2.0
"""The most (real) seconds the sync of a completed row's batch waits for the next
call's prepared row to be asked for."""

Event = tuple[str, tuple[tuple[str, str | None], ...]]


def spy_commits(
    monkeypatch: pytest.MonkeyPatch,
    events: list[Event],
    asked: Callable[[tuple[tuple[str, str | None], ...]], None] = lambda names: None,
) -> None:
    """Record each commit as asked (before it is queued) and durable (returned);
    `asked` sees each commit's rows as it is asked for."""
    commit = JournalWriter.commit

    async def spied(self: JournalWriter, rows: Sequence[RowModel], **kwargs: Any) -> Any:
        names = tuple((str(getattr(r, "row", "")), getattr(r, "call", None)) for r in rows)
        events.append(("asked", names))
        asked(names)
        done = await commit(self, rows, **kwargs)
        events.append(("durable", names))
        return done

    monkeypatch.setattr(JournalWriter, "commit", spied)


def at(events: list[Event], kind: str, row: str, call: str) -> int:
    return next(i for i, (k, names) in enumerate(events) if k == kind and (row, call) in names)


async def test_the_next_call_is_admitted_once_a_call_s_end_is_queued_not_synced(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: GEN-5, STEP-21, HARV-56: in a chain, the build call's prepared rows
    are asked for before the explore call's completed row is durable (the gate
    took the explore call's end once its rows were queued); the writer keeps the
    order, so the journal holds the same rows in the same order, and every call
    still gets its close step after its completed row.

    The journal syncs in a worker thread, as the run process's does; the sync of
    a batch holding a completed row but the last call's waits (in that thread, up to HOLD_S) until
    the next call's prepared row is asked for, so the order is not the disk's
    speed's: without the early end it waits out HOLD_S and the next call's row is
    asked for only after the sync."""
    events: list[Event] = []
    holding: list[threading.Event] = []
    """The event the sync of a completed row's batch waits on, while one does."""

    def asked(names: tuple[tuple[str, str | None], ...]) -> None:
        if any(row == "completed" and call != "review.1" for row, call in names):
            holding.append(threading.Event())
        elif holding and any(row == "prepared" for row, _ in names):
            holding[-1].set()

    def held_sync(fd: int) -> None:
        if holding and not holding[-1].is_set():
            holding[-1].wait(HOLD_S)
        sync_data(fd)

    spy_commits(monkeypatch, events, asked)
    monkeypatch.setattr(log, "sync_data", held_sync)
    monkeypatch.setattr(
        session_run_tests,
        "open_journal_writer",
        functools.partial(open_journal_writer, sync_in_thread=True),
    )
    async with harness(tmp_path) as h:
        state, rows = await h.go()
    assert state == "ended" and rows[-1]["status"] == "completed"
    for call in ("explore.1", "build.1", "review.1"):
        assert kinds(rows, call) == [
            "prepared",
            "step_published",
            "thread_started",
            "turn_started",
            "completed",
        ]
    order = [(row["row"], row.get("call")) for row in rows]
    assert order.index(("completed", "explore.1")) < order.index(("prepared", "build.1"))
    assert order.index(("completed", "build.1")) < order.index(("prepared", "review.1"))
    for done, after in (("explore.1", "build.1"), ("build.1", "review.1")):
        assert at(events, "asked", "prepared", after) < at(events, "durable", "completed", done)
    assert len(h.owner.spawned) == 3


async def test_the_bind_s_look_for_strays_reads_the_host_while_its_rows_are_synced(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: BIND-6, DISP-25: each bind's look for the owner's other subagents
    carrying the step's marker begins after its rows are asked for and before
    they are durable; the bind's rows are one batch as before."""
    events: list[Event] = []
    spy_commits(monkeypatch, events)
    spawned = HostReader.spawned
    looks: list[int] = []

    async def spied(self: HostReader, owner: str, marker: str, bound: Any = None) -> Any:
        looks.append(len(events))
        return await spawned(self, owner, marker, bound)

    monkeypatch.setattr(HostReader, "spawned", spied)
    async with harness(tmp_path) as h:
        state, rows = await h.go()
    assert state == "ended" and rows[-1]["status"] == "completed"
    for call in ("explore.1", "build.1", "review.1"):
        asked = at(events, "asked", "thread_started", call)
        durable = at(events, "durable", "thread_started", call)
        assert events[asked][1] == (("thread_started", call), ("turn_started", call))
        assert any(asked < look <= durable for look in looks), (call, asked, durable, looks)
