"""The HostReader: coalesced reads, notification wake-ups, a host that stops answering."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
from trio.testing import MockClock

from crw.actors import attempt_watch, thread_watches
from crw.actors.host_reader import HostReader, open_host_reader
from crw.actors.thread_watches import ThreadWatches
from crw.engine.calls import lost
from crw.host.client import HostClient, open_client
from crw.host.sim.connection import connect_in_memory
from crw.host.sim.server import open_sim_host
from crw.host.transport import HostUnavailable
from crw.settings import Settings


@asynccontextmanager
async def reader_on_sim(
    tmp_path: Path, settings: Settings
) -> AsyncIterator[tuple[HostClient, HostReader]]:
    async with (
        open_sim_host(tmp_path / "home") as sim,
        open_client(await connect_in_memory(sim)) as client,
        open_host_reader(client, settings) as reader,
    ):
        yield client, reader


async def _start(reader: HostReader, client: HostClient, **script: Any) -> tuple[str, str]:
    if script:
        await client.request("sim/script", {"match": {"marker": "*"}, "behaviour": script})
    thread = await reader.start_thread(cwd="/w")
    turn = await reader.start_turn(thread.id, "crw-flow-op: a.1/t1-a1\nCRW-ROLE: explorer\n")
    return thread.id, turn.id


async def test_turn_end_wakes_its_waiter_without_waiting_for_the_poll(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    async with reader_on_sim(tmp_path, Settings(host_poll_interval=600)) as (client, reader):
        thread_id, turn_id = await _start(reader, client, seconds=5)
        start = trio.current_time()
        turn = await reader.wait_turn(thread_id, turn_id)
        assert turn.status == "completed"
        assert trio.current_time() - start < 10  # the turn's 5 s, not the 600 s poll


async def test_many_waiters_on_one_thread_share_its_reads(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    async with reader_on_sim(tmp_path, Settings(host_poll_interval=600)) as (client, reader):
        thread_id, turn_id = await _start(reader, client, seconds=5)
        before = reader.reads
        ends: list[str] = []

        async def wait() -> None:
            ends.append((await reader.wait_turn(thread_id, turn_id)).status)

        async with trio.open_nursery() as nursery:
            for _ in range(20):
                nursery.start_soon(wait)
        assert ends == ["completed"] * 20
        # Every change the host announced costs one read for all twenty waiters.
        assert reader.reads - before <= 8


async def test_reader_polls_when_no_notification_comes(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The reader hands its handler to the client when it subscribes: patched before.
    monkeypatch.setattr(ThreadWatches, "on_notification", lambda self, note: None)
    async with reader_on_sim(tmp_path, Settings(host_poll_interval=30)) as (client, reader):
        thread_id, turn_id = await _start(reader, client, seconds=5)
        start = trio.current_time()
        turn = await reader.wait_turn(thread_id, turn_id)
        assert turn.status == "completed"
        assert 30 <= trio.current_time() - start < 61


async def test_usage_is_the_newest_the_host_reported(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    async with reader_on_sim(tmp_path, Settings()) as (client, reader):
        tokens = {"input": 40, "cachedInput": 0, "output": 2, "reasoningOutput": 0}
        thread_id, turn_id = await _start(reader, client, tokens=tokens)
        await reader.wait_turn(thread_id, turn_id)
        usage = reader.usage(thread_id)
        assert usage is not None and usage.total.inputTokens == 40


async def test_host_that_stops_answering_is_unavailable_to_its_callers(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with reader_on_sim(tmp_path, Settings(host_timeout=60)) as (client, reader):
        thread_id, _ = await _start(reader, client)

        async def never(*args: object, **kwargs: object) -> None:
            await trio.sleep_forever()

        monkeypatch.setattr(client, "thread_read", never)
        with pytest.raises(HostUnavailable, match="did not answer thread/read"):
            await reader.read(thread_id)


async def _stale_first_read(
    client: HostClient, monkeypatch: pytest.MonkeyPatch, thread_id: str, turn_id: str
) -> list[str]:
    """Make the next thread/read answer as the host would just before the turn
    ended, and come back only after `turn/completed` was handled: the answer and
    the notification arrive in one batch, the answer first. The statuses each
    read held of the turn are listed."""
    read = client.thread_read
    seen: list[str] = []

    async def racing(thread: str, *, include_turns: bool = True) -> Any:
        answer = await read(thread, include_turns=include_turns)
        if not seen:
            await trio.sleep(10)  # the 5 s turn ends and its turn/completed is handled
        seen.extend(t.status for t in answer.turns if t.id == turn_id)
        return answer

    monkeypatch.setattr(client, "thread_read", racing)
    return seen


async def test_a_read_on_its_way_when_the_turn_ended_is_read_again_for_its_answer(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: HARV-2: a read that began before `turn/completed` holds the turn
    without its answer:
    the end it did not see is not pasted onto it (that took an answer as empty and
    ran a repair turn for it); the thread is read again."""
    async with reader_on_sim(tmp_path, Settings(host_poll_interval=600)) as (client, reader):
        thread_id, turn_id = await _start(reader, client, seconds=5)
        seen = await _stale_first_read(client, monkeypatch, thread_id, turn_id)
        start = trio.current_time()
        turn = await reader.wait_turn(thread_id, turn_id)
        assert seen == ["inProgress", "completed"]
        assert turn.status == "completed"
        assert [item.type for item in turn.items][-1] == "agentMessage"
        assert trio.current_time() - start < 60  # woken by the end, not the 600 s poll


async def test_a_lost_rule_look_at_a_read_on_its_way_when_the_turn_ended_reads_again(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: HARV-1, HARV-2: the session call's follower (`attempt_watch.follow`)
    alike: a read taken before the marker turn's end is not judged ended by the
    notification."""
    settings = Settings(host_poll_interval=600, poll_interval=600)
    async with reader_on_sim(tmp_path, settings) as (client, reader):
        thread_id, turn_id = await _start(reader, client, seconds=5)
        seen = await _stale_first_read(client, monkeypatch, thread_id, turn_id)
        decision = await attempt_watch.follow(reader, settings, thread_id, turn_id=turn_id)
        assert seen == ["inProgress", "completed"]
        assert isinstance(decision, lost.Ended)
        assert decision.turn.status == "completed"
        assert [item.type for item in decision.turn.items][-1] == "agentMessage"


async def test_threads_no_caller_asked_about_are_kept_to_a_bound_oldest_dropped_first(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The host sends every subagent's notifications to every client: a run on a
    shared host hears other runs' threads end and count tokens. What it is told of
    threads no call asked about is kept for the newest UNCLAIMED_KEPT of them; a
    thread a call asked about is kept until the call forgets it."""
    monkeypatch.setattr(thread_watches, "UNCLAIMED_KEPT", 2)
    async with reader_on_sim(tmp_path, Settings(host_poll_interval=600)) as (client, reader):
        await client.request("sim/script", {"match": {"marker": "*"}, "behaviour": {"seconds": 1}})
        threads: list[tuple[str, str]] = []
        for n in range(5):
            thread = await reader.start_thread(cwd="/w")
            text = f"crw-flow-op: c{n}.1/t1-a1\nCRW-ROLE: explorer\n"
            threads.append((thread.id, (await reader.start_turn(thread.id, text)).id))
            await trio.sleep(0.1)  # the turns end in the order they started
        claimed = threads[0]
        await trio.sleep(0.55)  # the oldest has ended (its notifications came), no other
        assert reader.announced(*claimed) is not None
        assert all(reader.announced(*thread) is None for thread in threads[1:])
        reader.changed(claimed[0])  # a call asks about the oldest
        await trio.sleep(5)  # every turn ends: turn/completed and its token count
        held = [reader.announced(*thread) is not None for thread in threads]
        assert held == [True, False, False, True, True]
        assert reader.watched == 3
        reader.forget(claimed[0])
        assert reader.watched == 2


async def test_forgetting_a_thread_wakes_whoever_kept_what_it_read_of_it(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """A caller keeps a read until the thread's change event is set (the wake keeps
    the owner's status so); another forgets the thread (a v2 bind does, after
    each read of the owner): the event is set then, so the keeper reads again,
    rather than waiting on an event no notification would set, the next one
    setting a new watch's (the owner idle, taken for busy, and no wake sent)."""
    async with reader_on_sim(tmp_path, Settings(host_poll_interval=600)) as (_, reader):
        thread = await reader.start_thread(cwd="/w")
        kept = reader.changed(thread.id)
        await reader.status(thread.id)
        reader.forget(thread.id)
        assert kept.is_set()
        assert reader.watched == 0
        fresh = reader.changed(thread.id)
        assert not fresh.is_set() and fresh is not kept


async def test_a_thread_whose_rollout_is_still_empty_is_read_again_not_raised(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """codex 0.169 answers thread/read, with turns and without, with "rollout at
    <path> is empty" while the thread's rollout file is made but its first line not
    yet written (seen on the real app-server: a run ended by it). The
    reader reads again until the thread reads, within host_timeout; an error that
    lasts past it is raised as the host's."""
    from crw.host.errors import HostRequestError

    empty = "failed to read session metadata /h/r.jsonl: rollout at /h/r.jsonl is empty"
    async with reader_on_sim(tmp_path, Settings(host_timeout=60)) as (client, reader):
        thread_id, _ = await _start(reader, client)
        real = client.thread_read
        refusals = [3]

        async def not_yet(thread: str, include_turns: bool = True) -> Any:
            if refusals[0] > 0:
                refusals[0] -= 1 if not include_turns else 0
                raise HostRequestError("thread/read", -32603, empty)
            return await real(thread, include_turns=include_turns)

        monkeypatch.setattr(client, "thread_read", not_yet)
        start = trio.current_time()
        thread = await reader.read(thread_id)
        assert thread.id == thread_id and refusals == [0]
        assert trio.current_time() - start < 1

        refusals[0] = 10**9
        with pytest.raises(HostRequestError, match="is empty"):
            await reader.read(thread_id)
        assert trio.current_time() - start >= 60
