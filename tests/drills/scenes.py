"""The drills' scenes: where in its life a call is stopped, on the simulated host.

Each `Point` scripts the host (and the owner) so that the stopped call reaches
that point, and says when it is there; scripted with `disturbed=False` it is the
same run with nothing in its way, whose results every drill must end with.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import trio

from crw.bus import inbox as reports
from crw.bus import steps as bus
from tests.actors.test_session_run import RUN_ID, Harness, Owner

Rows = list[dict[str, Any]]
REVIEWED = """
name = "reviewed"
pool = 2

[[node]]
id = "build"
role = "executor"
task = "Fix the parser."
schema = { type = "object", required = ["summary"], properties = { summary = { type = "string" } } }
review = { role = "reviewer", rounds = 1 }

[[node]]
id = "ship"
role = "explorer"
needs = ["build"]
task = "Ship {build.summary}."
schema = { type = "object", required = ["done"], properties = { done = { type = "boolean" } } }
"""
REJECT = {"verdict": "reject", "findings": ["the summary names no file"]}
FIXED = {"summary": "fixed parser.py"}


@dataclass
class GatedOwner(Owner):
    """The owner thread, but it takes no step of `hold` while `hold` is set, and
    takes each other step once."""

    hold: str | None = None
    seen: set[tuple[str, int, int]] = field(default_factory=set)

    async def play(self) -> None:
        while True:
            for step in await trio.to_thread.run_sync(bus.list_steps, self.run):
                key = (step.call, step.k, step.attempt)
                if key in self.seen or step.call == self.hold:
                    continue
                self.seen.add(key)
                agent = await self._take(step)
                written = reports.Report.new(RUN_ID, step.call, step.k, step.attempt, agent, "t")
                reports.write_report(self.run, written)
            for close in bus.list_closes(self.run):
                if self.v2:
                    params = {"parentThreadId": self.thread_id, "target": close.agent_id}
                    await self.client.request("sim/v2/interruptAgent", params)
                    bus.remove_close(self.run, close.call, close.attempt, close.agent_id)
                    continue
                await self.client.request("sim/closeAgent", {"target": close.agent_id})
                bus.remove_close(self.run, close.call, close.attempt, close.agent_id)
            await trio.sleep(0.5)


def has(kind: str, call: str, **fields: Any) -> Callable[[Rows], bool]:
    """Whether the rows hold a `kind` row of `call` with `fields`."""

    def holds(rows: Rows) -> bool:
        return any(
            r["row"] == kind
            and r.get("call") == call
            and all(r.get(name) == value for name, value in fields.items())
            for r in rows
        )

    return holds


@dataclass(frozen=True)
class Point:
    """A point of a call's life: the call, its scripts, and when it is there."""

    name: str
    call: str
    reviewed: bool = False
    interrupted: bool = True
    """Whether the call has a turn on the host there (the stop interrupts it)."""

    async def script(self, h: Harness, *, disturbed: bool) -> None:
        """Script the host and the owner; `disturbed`: so that the call stays there."""
        if self.reviewed:
            (h.run.root.parent / "wf.toml").write_text(REVIEWED)
            await h.script({"marker": "build.2/*"}, answer=REJECT, seconds=1)
            await h.script({"marker": "build.3/*"}, answer=FIXED, seconds=1)
        h.owner = GatedOwner(h.client, h.run, h.owner.thread_id, v2=h.owner.v2)
        if self.name == "repair":
            await h.script({"marker": f"{self.call}/t1-*"}, invalidFirst=True)
        if not disturbed:
            return
        if self.name == "dispatch":
            h.owner.hold = self.call
        elif self.name == "repair":
            await h.script({"marker": f"{self.call}/t2-a1"}, hang=True)
        elif self.name == "answered":
            await h.script({"marker": f"{self.call}/t1-a1"}, seconds=300)
        else:
            await h.script({"marker": f"{self.call}/t1-a1"}, hang=True)

    def there(self) -> Callable[[Rows], bool]:
        """When the call is at this point, from its rows (and the host)."""
        if self.name == "dispatch":
            return has("step_published", self.call)
        if self.name == "repair":
            return has("turn_started", self.call, k=2)
        return has("turn_started", self.call)

    def release(self, h: Harness) -> None:
        """Let the call go on (the owner takes its steps again)."""
        if isinstance(h.owner, GatedOwner):
            h.owner.hold = None


POINTS = [
    Point("dispatch", "build.1", interrupted=False),
    Point("running", "build.1"),
    Point("repair", "build.1"),
    Point("answered", "build.1"),
    Point("review", "build.3", reviewed=True),
]


def results(rows: Rows) -> dict[str, Any]:
    """Each call's result, from its completed row."""
    return {r["call"]: r["result"] for r in rows if r["row"] == "completed"}


def turned_twice(h: Harness) -> dict[str, int]:
    """The markers the host started more than one turn for, on the owner's subagents
    (on v2 the tasks the children were given: a task is no thread item)."""
    counts: dict[str, int] = {}
    for thread in h.sim.state.threads.values():
        if thread.parent_thread_id != h.owner.thread_id:
            continue
        for task in thread.tasks:
            marker = task.split("\n", 1)[0].removeprefix("crw-flow-op: ")
            counts[marker] = counts.get(marker, 0) + 1
        for turn in thread.turns if thread.agent_path is None else ():
            user = next(i for i in turn.items if i["type"] == "userMessage")
            first = user["content"][0]["text"].split("\n", 1)[0]
            marker = first.removeprefix("crw-flow-op: ")
            counts[marker] = counts.get(marker, 0) + 1
    return {marker: n for marker, n in counts.items() if n > 1}
