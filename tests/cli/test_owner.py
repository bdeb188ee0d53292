"""The scripted owner (`crw.cli.demo.scripted_owner`) takes each step once.

A step `crw flow next` marks `reported` gets no host call and no report; a step
the owner made a subagent for, published again by a resumed run, is reported
again with that subagent and never spawned (or sent) a second time. The host is a
recorder and `dispatched` answers what the test says, so each test reads the
host calls the owner made and the reports it wrote.
"""

from __future__ import annotations

from typing import Any

import trio

from crw.cli.demo.scripted_owner import ScriptedOwner, Taken


class Host:
    """Records each request; a spawn answers a new agent id."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, dict[str, Any]]] = []

    async def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self.requests.append((method, params))
        return {"agentId": f"agent-{len(self.requests)}"}


class Owner(ScriptedOwner):
    """The scripted owner whose reports are recorded and answered `reply`."""

    def __init__(self, host: Host, reply: str) -> None:
        super().__init__(host, "run-1", "owner-thread", state=None)  # type: ignore[arg-type]
        self.reply = reply
        self.reports: list[tuple[str, str]] = []

    async def dispatched(self, step: dict[str, Any], agent: str) -> dict[str, Any]:
        self.reports.append((step["op"], agent))
        return {"reply": self.reply}


def spawn_step(*, reported: bool) -> dict[str, Any]:
    return {
        "call": "build.1",
        "k": 1,
        "attempt": 1,
        "op": "build.1/t1",
        "action": "spawn",
        "reported": reported,
        "host_call": {
            "tool": "spawn_agent",
            "arguments": {"agent_type": "executor", "message": "crw-flow-op: build.1/t1-a1\n"},
        },
    }


def take(owner: Owner, *steps: dict[str, Any]) -> list[Taken | None]:
    async def main() -> list[Taken | None]:
        return [await owner.take(step) for step in steps]

    return trio.run(main)


def test_a_reported_step_gets_no_host_call_and_no_report() -> None:
    """No requirement names the demo's owner: docs/session.md tells every owner to
    take a step `next` marks reported: true no further, and this one does so."""
    host = Host()
    owner = Owner(host, "bound")
    assert take(owner, spawn_step(reported=True)) == [None]
    assert host.requests == []
    assert owner.reports == []


def test_a_step_published_again_is_reported_again_with_the_subagent_made_for_it() -> None:
    """No requirement names the demo's owner (docs/session.md): a step a resumed run
    publishes again is reported with the subagent made for it, never spawned again."""
    host = Host()
    owner = Owner(host, "queued")  # the run process died: the report waits
    first, again = take(owner, spawn_step(reported=False), spawn_step(reported=False))
    assert [method for method, _ in host.requests] == ["sim/spawnAgent"]
    assert owner.reports == [("build.1/t1", "agent-1"), ("build.1/t1", "agent-1")]
    assert first is not None and again is not None
    assert (first.again, again.again) == (False, True)
    assert "spawn reported again" in again.line()


def test_a_subagent_its_reply_turns_down_is_not_reported_again() -> None:
    """spec: CMD-DISP-6"""
    host = Host()
    owner = Owner(host, "pair_mismatch")
    take(owner, spawn_step(reported=False), spawn_step(reported=False))
    assert [method for method, _ in host.requests] == ["sim/spawnAgent", "sim/spawnAgent"]
    assert owner.reports == [("build.1/t1", "agent-1"), ("build.1/t1", "agent-2")]
