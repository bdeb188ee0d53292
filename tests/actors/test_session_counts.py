"""What a plain session call costs the host: the requests a call answered at its
first turn makes, counted (never timed). The harness is `test_session_run`'s."""

from __future__ import annotations

import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import trio
from trio.testing import MockClock

from crw.actors.host_reader import HostReader
from crw.host.protocol import Thread
from tests.actors.spies import names_read
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


async def test_a_bound_steps_retraction_its_reply_and_the_close_step_take_no_worker_thread_hop(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: STEP-21, BIND-6, DISP-2, STEP-22, HARV-56: a step file follows its
    packet; a bind's rows are committed, then the step file is retracted and only
    then the report answered bound (an owner that has the reply never sees the
    step again); the close step follows the call's terminal row. None of them is
    synced, and all four are written in the loop's thread, as the packet and P are
    (a plain call takes no worker-thread hop but the journal's, inline here; one a
    call before, the packet's). A hop's syscalls cost the run process more CPU than
    in the loop (wakes, thread naming, GIL hand-offs)."""
    from crw.bus import inbox as files
    from crw.bus import steps as bus

    events: list[tuple[str, str, bool]] = []
    hops: Counter[str] = Counter()
    run_sync = trio.to_thread.run_sync
    step_file, retract = bus.write_step_file, bus.retract_step
    reply, close = files.write_reply, bus.write_close
    loop = threading.get_ident()

    async def counted(fn: Any, *args: Any, **kwargs: Any) -> Any:
        hops[getattr(fn, "__name__", "")] += 1
        return await run_sync(fn, *args, **kwargs)

    def stepped(run: Any, step: bus.StepFile) -> None:
        packet, _ = bus.step_paths(run, step.call, step.k, step.attempt)
        events.append(("step", step.call, packet.exists() and threading.get_ident() == loop))
        step_file(run, step)

    def retracted(run: Any, call: str, k: int, attempt: int) -> None:
        events.append(("retract", call, threading.get_ident() == loop))
        retract(run, call, k, attempt)

    def replied(run: Any, body: dict[str, Any]) -> None:
        events.append(("reply", body["call"], threading.get_ident() == loop))
        reply(run, body)

    def closed(run: Any, call: str, attempt: int, agent_id: str, **kwargs: Any) -> None:
        events.append(("close", call, threading.get_ident() == loop))
        close(run, call, attempt, agent_id, **kwargs)

    monkeypatch.setattr(trio.to_thread, "run_sync", counted)
    monkeypatch.setattr(bus, "write_step_file", stepped)
    monkeypatch.setattr(bus, "retract_step", retracted)
    monkeypatch.setattr(files, "write_reply", replied)
    monkeypatch.setattr(bus, "write_close", closed)
    async with harness(tmp_path) as h:
        await h.script({"marker": "*"}, seconds=0)
        state, rows = await h.go()
    assert state == "ended"
    for call in ("explore.1", "build.1", "review.1"):
        mine = [(kind, in_loop) for kind, c, in_loop in events if c == call]
        assert mine == [("step", True), ("retract", True), ("reply", True), ("close", True)]
        assert kinds(rows, call)[-1] == "completed"
    # The harness's owner lists the bus from a worker thread; the journal's open
    # (its store's `open_appender`) is one.
    del hops["list_steps"], hops["open_appender"]
    assert hops == {}


async def test_a_new_calls_directory_and_its_first_steps_files_take_no_worker_thread_hop(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: STEP-2, STEP-21: a new call's prepared and step_published rows are
    durable first; then its directory P is made and only then the step's packet
    written, both in the loop's thread when P is a plain directory and nothing is
    synced (one worker-thread hop a call before, two before that)."""
    from crw.actors.session_call import SessionCall
    from crw.bus import steps as bus

    events: list[tuple[str, str, bool]] = []
    loop = threading.get_ident()
    make_p, write_packet = SessionCall._make_p, bus.write_packet

    def made(self: SessionCall) -> None:
        events.append(("P", self.call, threading.get_ident() == loop))
        make_p(self)

    def written(run: Any, step: Any, text: str | None, **kwargs: Any) -> None:
        events.append(("packet", step.call, threading.get_ident() == loop))
        write_packet(run, step, text, **kwargs)

    monkeypatch.setattr(SessionCall, "_make_p", made)
    monkeypatch.setattr(bus, "write_packet", written)
    async with harness(tmp_path) as h:
        await h.script({"marker": "*"}, seconds=0)
        state, _rows = await h.go()
    assert state == "ended"
    for call in ("explore.1", "build.1", "review.1"):
        assert [(kind, in_loop) for kind, c, in_loop in events if c == call] == [
            ("P", True),
            ("packet", True),
        ]


async def test_a_session_calls_commits_ask_for_no_stamped_copies(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A session call keeps the rows it commits as it built them (the journal's seq
    and `at` are not among them): its commits ask the journal writer for no copy of
    each row (~5 a call, each a pydantic copy)."""
    from crw.actors.journal_writer import JournalWriter

    stamped: list[bool] = []
    commit = JournalWriter.commit

    async def counted(self: JournalWriter, rows: Any, **kwargs: Any) -> Any:
        if any(getattr(row, "call", None) == "explore.1" for row in rows):
            stamped.append(kwargs.get("stamped", True))
        return await commit(self, rows, **kwargs)

    monkeypatch.setattr(JournalWriter, "commit", counted)
    async with harness(tmp_path) as h:
        state, _rows = await h.go()
    assert state == "ended"
    assert stamped == [False, False, False]


@pytest.mark.parametrize("limit", [None, 0])
async def test_a_short_turns_rollout_is_read_without_a_worker_thread_hop(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch, limit: int | None
) -> None:
    """spec: HARV-16: a call's tokens are its rollout's last token_count. A rollout
    up to INLINE_ROLLOUT bytes (a short turn's) is read in the loop's thread, no
    worker-thread hop; a larger one in a worker thread, one hop a call. The tokens
    are the same either way."""
    from crw.actors import rollout_tokens
    from crw.engine.answers import outcome

    if limit is not None:
        monkeypatch.setattr(rollout_tokens, "INLINE_ROLLOUT", limit)
    hops: Counter[str] = Counter()
    run_sync = trio.to_thread.run_sync

    async def counted(fn: Any, *args: Any, **kwargs: Any) -> Any:
        hops[getattr(fn, "__name__", "")] += 1
        return await run_sync(fn, *args, **kwargs)

    monkeypatch.setattr(trio.to_thread, "run_sync", counted)
    read = names_read(monkeypatch, outcome, "read_rollout_total")
    async with harness(tmp_path) as h:
        await h.script({"marker": "*"}, seconds=0)
        state, rows = await h.go()
    assert state == "ended"
    assert len(read) == 3
    assert hops["read_rollout_total"] == (0 if limit is None else 3)
    ends = [r for r in rows if r.get("row") == "completed"]
    assert len(ends) == 3 and all(r.get("tokens") for r in ends)
