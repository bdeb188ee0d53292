"""The scripted owner (`crw demo`, `crw host sim owner`) takes multi-agent v2 steps
as `crw flow next` gives them, on a simulated host whose owner has v2's tools."""

from __future__ import annotations

from pathlib import Path

import trio
import trio.testing

from crw.cli.demo.scripted_owner import take_on_host
from crw.engine.owner.host_call_v2 import close_call_v2, tool_call_v2
from crw.engine.steps.step_file import CloseStep, StepFile
from crw.host.client import open_client
from crw.host.sim.connection import connect_in_memory
from crw.host.sim.server import open_sim_host

STEP = StepFile(
    call="build.1",
    k=1,
    attempt=1,
    op="build.1/t1",
    marker="build.1/t1-a1",
    role="executor",
    action="spawn",
    agent_type="executor",
    model=None,
    reasoning_effort=None,
    message="crw-flow-op: build.1/t1-a1\nCRW-ROLE: executor\n\nDo it.",
    packet="/nonexistent/packet.md",
    workspace="/w",
    agent_id=None,
)


async def test_the_scripted_owner_spawns_follows_up_and_interrupts_on_v2(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with (
        open_sim_host(tmp_path / "home", multi_agent_v2=True) as sim,
        open_client(await connect_in_memory(sim)) as client,
    ):
        owner = str((await client.request("sim/startOwner", {}))["threadId"])
        spawn = STEP.to_json() | {"host_call": tool_call_v2(STEP, "run-1")}
        path = await take_on_host(client, owner, spawn)
        await trio.sleep(60)
        child = next(t for t in sim.state.threads.values() if t.agent_path == path)
        repair = StepFile(**(STEP.to_json() | {"k": 2, "action": "send_input", "agent_id": path}))
        sent = repair.to_json() | {"host_call": tool_call_v2(repair, "run-1")}
        assert await take_on_host(client, owner, sent) == path
        close = CloseStep(call="build.1", attempt=1, agent_id=child.id)
        closing = close.to_json() | {"host_call": close_call_v2(close)}
        assert await take_on_host(client, owner, closing) == child.id
    assert path.startswith("/root/crw_") and len(child.tasks) == 2
    assert child.turns[-1].status == "interrupted"
