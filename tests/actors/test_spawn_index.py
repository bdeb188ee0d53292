"""The session run's host requests: the marker lookup's in proportion to the owner's
new subagents, a resume's not one read per ended call.

The lookup (DISP-25) lists the host's subagents and reads the owner's new ones at
every poll of every waiting spawn step; what it costs must not grow with the
subagents the host held before (closed, or old and done), nor with the number of
calls that wait at once.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import trio
from trio.testing import MockClock

from crw.actors.host_reader import HostReader, open_host_reader
from crw.actors.session_run import close_left_open
from crw.actors.spawn_index import LISTING_SETTLE_S, OwnerSpawns
from crw.bus.steps import list_closes
from crw.engine.run.rundir import RunDir
from crw.host.client import HostClient, open_client
from crw.host.sim.connection import connect_in_memory
from crw.host.sim.server import open_sim_host
from crw.journal.replay import CallState, RunState
from crw.settings import Settings

POLL = 2.0
EPOCH = 1_800_000_000.0


@asynccontextmanager
async def owner_on_sim(tmp_path: Path) -> AsyncIterator[tuple[HostClient, HostReader, str]]:
    """A simulated host whose creation times follow the Trio clock, its owner thread."""
    async with (
        open_sim_host(tmp_path / "home", wall=lambda: EPOCH + trio.current_time()) as sim,
        open_client(await connect_in_memory(sim)) as client,
        open_host_reader(client, Settings(poll_interval=POLL, host_poll_interval=600)) as reader,
    ):
        owner = (await client.request("sim/startOwner", {"cwd": "/w"}))["threadId"]
        yield client, reader, owner


async def spawn(client: HostClient, owner: str, marker: str, *, close: bool = False) -> str:
    agent = await client.request(
        "sim/spawnAgent",
        {"parentThreadId": owner, "message": f"crw-flow-op: {marker}\nCRW-ROLE: executor\n"},
    )
    if close:
        await client.request("sim/closeAgent", {"target": agent["agentId"]})
    return str(agent["agentId"])


async def lookup_cost(reader: HostReader, owner: str, marker: str) -> tuple[int, int, int]:
    """(thread/list requests, thread/read requests, subagents found) of one lookup."""
    lists, reads = reader.lists, reader.reads
    found = await reader.spawned(owner, marker)
    return reader.lists - lists, reader.reads - reads, len(found)


async def history_then_lookups(tmp_path: Path, old: int) -> list[tuple[int, int, int]]:
    """`old` subagents spawned long ago (half closed), then three looks: nothing
    new, two new subagents one of which carries the marker, nothing new again."""
    async with owner_on_sim(tmp_path) as (client, reader, owner):
        for n in range(old):
            await spawn(client, owner, f"old{n}.1/t1-a1", close=n % 2 == 0)
            await trio.sleep(1)  # the owner spawned them one by one, over time
        await trio.sleep(60)
        await reader.spawned(owner, "warm-up")  # the first look of a process lists all
        costs = []
        await trio.sleep(POLL)
        costs.append(await lookup_cost(reader, owner, "a.1/t1-a1"))
        await spawn(client, owner, "a.1/t1-a1")
        await spawn(client, owner, "b.1/t1-a1")
        await trio.sleep(POLL)
        costs.append(await lookup_cost(reader, owner, "a.1/t1-a1"))
        await trio.sleep(POLL)
        costs.append(await lookup_cost(reader, owner, "b.1/t1-a1"))
        return costs


async def test_lookup_requests_do_not_grow_with_old_and_closed_subagents(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: DISP-25. A look lists one page and reads only the new subagents (each
    once, for its first message) and the ones carrying the marker."""
    few = await history_then_lookups(tmp_path / "few", 4)
    many = await history_then_lookups(tmp_path / "many", 300)
    # nothing new: one page; two new: one page, each read once, the found one read
    # for the bind; then the other marker's subagent, indexed already, read alone.
    assert few == [(1, 0, 0), (1, 3, 1), (1, 1, 1)]
    assert many == few


async def test_waiting_calls_share_one_look_per_poll(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: DISP-25. Twenty calls polling at once cost one listing, and a subagent's
    first message is read once however many look it up."""
    async with owner_on_sim(tmp_path) as (client, reader, owner):
        for n in range(20):
            await spawn(client, owner, f"c{n}.1/t1-a1")
        found: list[int] = []

        async def look(n: int) -> None:
            found.append(len(await reader.spawned(owner, f"c{n}.1/t1-a1")))

        async with trio.open_nursery() as nursery:
            for n in range(20):
                nursery.start_soon(look, n)
        assert found == [1] * 20
        assert reader.lists == 1
        assert reader.reads == 20 + 20  # each read for its first message, then for its bind


async def test_a_subagent_read_for_its_first_message_is_not_read_again(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: DISP-25. A spawn's marker is its subagent's first message: a later turn
    (a repair, looked up on its own subagent) does not make the index read it again."""
    async with owner_on_sim(tmp_path) as (client, reader, owner):
        await client.request("sim/script", {"match": {}, "behaviour": {"seconds": 1}})
        bare = await client.request(
            "sim/spawnAgent", {"parentThreadId": owner, "message": ""}
        )  # no marker: indexed as carrying none
        assert await reader.spawned(owner, "a.1/t1-a1") == []
        await trio.sleep(POLL)  # its first turn ended
        await client.request(
            "sim/sendInput", {"target": bare["agentId"], "message": "crw-flow-op: a.1/t1-a1\n"}
        )
        await trio.sleep(POLL)
        assert await lookup_cost(reader, owner, "a.1/t1-a1") == (1, 0, 0)


async def test_a_resumed_run_closes_left_open_subagents_from_one_listing(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: HARV-56. A resumed run finds the ended calls' subagents the host still
    holds loaded from the listing: no thread/read per ended call."""
    async with owner_on_sim(tmp_path) as (client, reader, owner):
        run = RunDir(tmp_path / "run")
        run.create()
        replayed = RunState()
        for n in range(150):
            agent = await spawn(client, owner, f"n{n}.1/t1-a1", close=n >= 3)
            replayed.calls[f"n{n}.1"] = CallState(
                call=f"n{n}.1", state="completed", thread_id=agent, attempt=1
            )
        ctx: Any = SimpleNamespace(
            reader=reader, owner=owner, run=run, multi_agent="multi_agent_v1"
        )
        reads = reader.reads
        await close_left_open(ctx, replayed)
        assert reader.reads == reads and reader.lists == 2  # 150 subagents, 100 a page
        assert sorted(c.call for c in list_closes(run)) == ["n0.1", "n1.1", "n2.1"]


async def test_a_look_lists_the_subagents_new_since_the_last_not_the_last_seconds(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: DISP-25. At a high spawn rate (250 subagents in one second) a look
    after one more spawn costs one short page, not a page per 100 subagents
    created in the settle seconds: its cost is what is new, not the rate."""
    async with owner_on_sim(tmp_path) as (client, reader, owner):
        for n in range(250):
            await spawn(client, owner, f"r{n}.1/t1-a1")
        await reader.spawned(owner, "warm-up")  # the first look of a process lists all
        assert reader.lists == 3
        await spawn(client, owner, "new.1/t1-a1")
        await trio.sleep(POLL)
        assert await lookup_cost(reader, owner, "new.1/t1-a1") == (1, 2, 1)


async def test_a_subagent_shown_below_one_listed_before_is_found_by_the_deep_look(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: DISP-25. A subagent whose first message came late shows in the listing
    below a later one a look listed already (codex lists by creation second): the
    look that stops at the first one listed before misses it, the deep look of
    the settle interval finds it."""
    async with owner_on_sim(tmp_path) as (client, reader, owner):
        early = await spawn(client, owner, "early.1/t1-a1")
        late = await spawn(client, owner, "late.1/t1-a1")
        shown = False

        async def list_page(cursor: str | None, limit: int) -> tuple[list[Any], str | None]:
            """The sim's listing with `late` shown below `early`, once `shown`."""
            page, _ = await reader._list_subagents(None, 1000)
            reader.lists -= 1
            moved = [t for t in page if t.id != late]
            if shown:
                moved += [t for t in page if t.id == late]
            start = int(cursor or 0)
            return moved[start : start + limit], (
                str(start + limit) if len(moved) > start + limit else None
            )

        index = OwnerSpawns(owner, list_page, reader.read, POLL)
        assert [t.id for t in await index.carrying("early.1/t1-a1")] == [early]
        shown = True
        await trio.sleep(POLL)
        assert await index.carrying("late.1/t1-a1") == []  # stopped at `early`
        await trio.sleep(LISTING_SETTLE_S)
        assert [t.id for t in await index.carrying("late.1/t1-a1")] == [late]
