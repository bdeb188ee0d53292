"""The HostReader follows the host's notifications in the client's reader task."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import trio
from trio.testing import MockClock

from crw.actors.host_reader import open_host_reader
from crw.host.client import open_client
from crw.host.sim.connection import connect_in_memory
from crw.host.sim.server import open_sim_host
from crw.settings import Settings


class TaskSteps(trio.abc.Instrument):
    """Counts each task's steps (its schedule points), by the task's name."""

    def __init__(self) -> None:
        self.steps: Counter[str] = Counter()

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self.steps[task.name] += 1


async def test_the_readers_notifications_take_no_task_step_of_their_own(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """A turn's notifications (its thread's status changes, turn/started,
    turn/completed, token usage) are handled as the client reads them: the
    reader's follower task is not woken for each, and the turn's end still wakes
    its waiter at once (not at the poll)."""
    async with (
        open_sim_host(tmp_path / "home") as sim,
        open_client(await connect_in_memory(sim)) as client,
        open_host_reader(client, Settings(host_poll_interval=600)) as reader,
    ):
        await client.request("sim/script", {"match": {"marker": "*"}, "behaviour": {"seconds": 5}})
        counter = TaskSteps()
        trio.lowlevel.add_instrument(counter)
        try:
            thread = await reader.start_thread(cwd="/w")
            turn = await reader.start_turn(
                thread.id, "crw-flow-op: a.1/t1-a1\nCRW-ROLE: explorer\n"
            )
            start = trio.current_time()
            ended = await reader.wait_turn(thread.id, turn.id)
        finally:
            trio.lowlevel.remove_instrument(counter)
        assert ended.status == "completed"
        assert trio.current_time() - start < 10
        assert reader.usage(thread.id) is not None  # the token usage was followed
    follower = {name: n for name, n in counter.steps.items() if name.endswith("._follow")}
    assert follower == {}
