"""A scripted owner: plays a Codex owner thread against a session run.

It does what the hint of `crw flow next` tells an owner to do, through the same
surface: it asks `crw flow next RUN --wait S --json`, makes each step's host call
on the simulated host (`sim/spawnAgent` for spawn_agent, `sim/sendInput` for
send_input, `sim/closeAgent` for close_agent), reports each spawn and send_input
with `crw flow dispatched RUN CALL --agent ID --k K --attempt N --json`, and asks
again until the run is over. As the docs tell every owner, it makes no host call
for a step next marks `reported` (its report waits in the inbox; the run answers
it), and it never spawns (or sends) a step it took already: a run resumed after
its process died publishes the step again, and the owner reports the subagent it
made for it again instead (a report that repeats a bind is answered `bound`). The
two commands run in-process (their `--json`
output captured), so the owner reads exactly what an owner reads, without paying
for a fresh interpreter per command. `crw flow demo` and `bench/latency.py` use it.
"""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import trio

from crw.errors import RefusedError
from crw.host.client import HostClient

KEEPS = frozenset({"bound", "queued", "retry"})
"""Replies after which the subagent the owner made still stands for its step: the
owner reports it again if the step comes back, and makes no other."""
DONE_STATES = frozenset({"ended", "paused", "waiting_decision"})
"""States an owner stops at: the run is over, or waits on someone but the owner."""
IDLE_PAUSE = 0.02
"""Seconds between two asks when an answer came back at once with nothing to do
(a run still starting answers without waiting)."""


@dataclass(frozen=True)
class Taken:
    """One step the owner took: the step (an item of next's `steps`), the
    subagent it concerns, and the run's reply (none for a close)."""

    step: dict[str, Any]
    agent: str
    reply: dict[str, Any] | None = None
    again: bool = False
    """Whether the owner reported a subagent it made for the step before, without
    a host call."""

    def line(self) -> str:
        """`step build.1/t2-a1 send_input -> reply bound (agent …)`, or `close …`."""
        step = self.step
        if step["action"] == "close":
            return f"close {step['call']} a{step['attempt']} -> closed {self.agent}"
        reply = (self.reply or {}).get("reply")
        action = f"{step['action']} reported again" if self.again else step["action"]
        return (
            f"step {step['op']}-a{step['attempt']} {action} -> reply {reply} (agent {self.agent})"
        )


class ScriptedOwner:
    """The owner thread `thread_id` of the session run `run` on the host `client`.

    `wait` is the `--wait` of each `next`, `dispatch_wait` the `--wait` of each
    `dispatched`; `state` the `--state` both are given.
    """

    def __init__(
        self,
        client: HostClient,
        run: str,
        thread_id: str,
        *,
        state: str | None,
        wait: float = 5.0,
        dispatch_wait: float = 30.0,
    ) -> None:
        self.client = client
        self.run = run
        self.thread_id = thread_id
        self.state = state
        self.wait = wait
        self.dispatch_wait = dispatch_wait
        self.made: dict[tuple[str, int, int], str] = {}
        """The subagent made for each step (call, k, attempt) this owner took."""

    async def play(self, on_step: Callable[[Taken], None]) -> dict[str, Any]:
        """Take every step until the run is over (or waits on a decision, or is
        paused), handing each to `on_step`; returns next's last answer. Bound it
        with `trio.fail_after`."""
        while True:
            answer = await self.next()
            for step in answer["steps"]:
                taken = await self.take(step)
                if taken is not None:
                    on_step(taken)
            if answer["state"] in DONE_STATES:
                return answer
            if not answer["steps"]:
                await trio.sleep(IDLE_PAUSE)

    async def next(self) -> dict[str, Any]:
        """`crw flow next RUN --wait S --json`: its answer."""
        from crw.cli.owner.next import next_command

        _, answer = await _cli_json(
            next_command, self.run, wait=self.wait, state=self.state, json=True
        )
        return answer

    async def take(self, step: dict[str, Any]) -> Taken | None:
        """Make the step's host call; report a spawn or send_input with dispatched.
        None for a step already reported: no host call, no report. A step this
        owner made a subagent for is reported again with it, without a host call."""
        if step["action"] == "close":
            return Taken(step, await take_on_host(self.client, self.thread_id, step))
        if step.get("reported"):
            return None
        key = (step["call"], step["k"], step["attempt"])
        made = self.made.get(key)
        agent = made or await take_on_host(self.client, self.thread_id, step)
        self.made[key] = agent
        reply = await self.dispatched(step, agent)
        if reply.get("reply") not in KEEPS:
            del self.made[key]
        return Taken(step, agent, reply, again=made is not None)

    async def dispatched(self, step: dict[str, Any], agent: str) -> dict[str, Any]:
        """`crw flow dispatched RUN CALL --agent ID --k K --attempt N --json`: the reply."""
        from crw.cli.owner.dispatched import dispatched_command

        _, reply = await _cli_json(
            dispatched_command,
            self.run,
            step["call"],
            agent=agent,
            k=step["k"],
            attempt=step["attempt"],
            wait=self.dispatch_wait,
            state=self.state,
            json=True,
        )
        return reply


_V2_METHODS = {
    "spawn_agent": "sim/v2/spawnAgent",
    "followup_task": "sim/v2/followupTask",
    "interrupt_agent": "sim/v2/interruptAgent",
}
"""The simulated host's method for each multi-agent v2 tool a step names."""


async def take_on_host(client: HostClient, owner: str, step: dict[str, Any]) -> str:
    """Make the host call of `step` (an item of next's `steps`) on the simulated
    host as the owner thread `owner`: close_agent, send_input, or spawn_agent with
    the step's arguments; on a run that speaks multi-agent v2 (the host call names
    the `collaboration` namespace) the v2 tool it names, as given. Returns the
    subagent it concerns (the new one of a spawn: on v2 its path)."""
    arguments = step["host_call"]["arguments"]
    if step["host_call"].get("namespace") == "collaboration":
        method = _V2_METHODS[step["host_call"]["tool"]]
        answer = await client.request(method, {"parentThreadId": owner, **arguments})
        return str(answer.get("task_name") or arguments["target"])
    if step["action"] == "close":
        await client.request("sim/closeAgent", {"target": arguments["target"]})
        return str(arguments["target"])
    if step["action"] == "send_input":
        params = {"target": arguments["target"], "message": arguments["message"]}
        await client.request("sim/sendInput", params)
        return str(arguments["target"])
    params = {
        "parentThreadId": owner,
        "agentType": arguments["agent_type"],
        "message": arguments["message"],
    }
    if arguments.get("model") is not None:
        params["model"] = arguments["model"]
    if arguments.get("reasoning_effort") is not None:
        params["reasoningEffort"] = arguments["reasoning_effort"]
    return str((await client.request("sim/spawnAgent", params))["agentId"])


async def _cli_json(
    command: Callable[..., int], *args: Any, **kwargs: Any
) -> tuple[int, dict[str, Any]]:
    """Run a command with --json in a worker thread; its exit code and its object.

    The owner awaits each command before it does anything else, so nothing else
    prints while stdout is redirected."""

    def run() -> tuple[int, dict[str, Any]]:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = command(*args, **kwargs)
        answer = json.loads(out.getvalue())
        if not isinstance(answer, dict):
            raise RefusedError(f"{command.__name__} printed no JSON object: {answer!r}")
        return code, answer

    return await trio.to_thread.run_sync(run)
