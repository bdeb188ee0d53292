"""One read of the owner a poll on multi-agent v2 (`crw.actors.owner_children`):
the calls that wait on spawn steps share each look of the owner's thread, a
child found is known for good, and a report's ask reads afresh."""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import trio
from trio.testing import MockClock

from crw.actors.host_reader import HostReader, open_host_reader
from crw.actors.step_binder_v2 import owner_child
from crw.engine.steps.task_name import agent_path, task_name
from crw.host.client import HostClient, open_client
from crw.host.sim.connection import connect_in_memory
from crw.host.sim.server import open_sim_host
from crw.settings import Settings

RUN = "run-1"
POLL = 2.0
CALLS = 3
POLLS = 6


@asynccontextmanager
async def owner_on_v2(
    tmp_path: Path,
) -> AsyncIterator[tuple[HostClient, HostReader, str, Counter[str]]]:
    """A simulated host, its v2 owner, a reader polling every POLL seconds, and the
    thread/reads the reader sent, by thread."""
    async with (
        open_sim_host(tmp_path / "home") as sim,
        open_client(await connect_in_memory(sim)) as client,
    ):
        owner = str((await client.request("sim/startOwner", {"multiAgentV2": True}))["threadId"])
        reads: Counter[str] = Counter()
        thread_read = client.thread_read

        async def counted(thread_id: str, **params: Any) -> Any:
            reads[thread_id] += 1
            return await thread_read(thread_id, **params)

        client.thread_read = counted  # type: ignore[method-assign,assignment]
        # A child of another run's: the owner has a turn (one without is read twice).
        other = {"parentThreadId": owner, "task_name": task_name("run-2", "x.1/t1-a1")}
        await client.request("sim/v2/spawnAgent", other | {"message": "other"})
        async with open_host_reader(client, Settings(poll_interval=POLL)) as reader:
            yield client, reader, owner, reads


def path_of(call: int) -> str:
    return agent_path(task_name(RUN, f"c{call}.1/t1-a1"))


async def test_the_calls_waiting_on_spawns_read_the_owner_once_a_poll(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: DISP-25 on v2: each waiting call looks its child up at each of its
    polls, the polls of the calls apart (they began at other times); the owner's
    thread is read once a poll interval for all of them, not once a call."""
    async with owner_on_v2(tmp_path) as (_, reader, owner, reads):

        async def waiting(call: int) -> None:
            await trio.sleep(call * POLL / CALLS)  # its polls fall between the others'
            for _ in range(POLLS):
                assert await owner_child(reader, owner, path_of(call)) == (None, None)
                await trio.sleep(POLL)

        async with trio.open_nursery() as nursery:
            for call in range(CALLS):
                nursery.start_soon(waiting, call)
    assert reads[owner] <= POLLS + 1, reads  # each call reading it: CALLS * POLLS
    assert reader.owner_children(owner).looks == reads[owner]


async def test_a_child_found_is_known_for_good_and_a_report_reads_afresh(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """A report names a child spawned after the poll's look: its ask reads the owner
    again at once (`fresh`); then the child is known, and no ask reads the owner."""
    async with owner_on_v2(tmp_path) as (client, reader, owner, reads):
        assert await owner_child(reader, owner, path_of(0)) == (None, None)
        name = task_name(RUN, "c0.1/t1-a1")
        params = {"parentThreadId": owner, "task_name": name, "message": "do it"}
        await client.request("sim/v2/spawnAgent", params)
        assert await owner_child(reader, owner, path_of(0)) == (None, None)  # the poll's look
        child, why = await owner_child(reader, owner, path_of(0), fresh=True)
        assert child is not None and why is None
        before = reads[owner]
        await trio.sleep(10 * POLL)
        assert await owner_child(reader, owner, path_of(0)) == (child, None)
        assert await owner_child(reader, owner, path_of(0), fresh=True) == (child, None)
        assert reads[owner] == before == 2
