"""Two session runs of one workflow on one owner thread, with real processes: a
`crw host sim serve` host, the two runs' processes (`crw flow start ... --owner O
--host unix:S` twice) and the owner's commands, which the drill plays itself.

Both runs publish the same markers (`explore.1/t1-a1` in each). The owner takes
both runs' steps interleaved, run-b's first, and reports none of its spawns, so
every bind is the run's own host lookup (DISP-25, DISP-26); once, it reports
run-b's first subagent to run-a as run-a's step, which `crw flow dispatched`
answers refused, exit 1, and again once run-a's step has ended (a late report,
not told to close). Each run must bind only its own subagents and end with
its own answers. On multi-agent v2 (`[features] multi_agent_v2 = true` in the
start's and the host's config.toml) the owner takes next's v2 host calls, and
the runs bind by task name. Every process is reaped by pid at teardown.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from crw.engine.run.rundir import RunDir
from crw.engine.steps.task_name import task_name
from crw.journal.log import read_journal
from tests.drill.changes import RunChanges
from tests.drill.owner import V2_METHODS
from tests.drill.test_crash_drill import WORKFLOW, Drill, drill_at, kill, served

RUN_DEADLINE = 50.0
"""Seconds both runs may take to their end (the second run's next answers
`starting` for its first 15 s: its process never binds the owner's line)."""
SETTINGS = "\n[settings]\npoll_interval = 0.2\n"
"""No spawn is reported, so each bind is the run's own host lookup, made every
`poll_interval` (2 s by default, docs/timers.md): a wait of up to that per call,
three calls a run. A shorter one binds the same subagents sooner."""


@dataclass
class SharedOwner(Drill):
    """The drill's host and owner thread, with two runs started on that owner."""

    runs: list[RunDir] = field(default_factory=list)
    starts: list[dict[str, Any]] = field(default_factory=list)
    spawned: dict[str, list[str]] = field(default_factory=dict)
    warnings: dict[str, list[str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.workflow.write_text(WORKFLOW + SETTINGS)

    def start_both(self) -> None:
        for _ in range(2):
            out = self.crw.start(
                str(self.workflow), "--owner", self.owner_thread, "--host", f"unix:{self.socket}"
            )
            assert out.code == 0, out.stderr
            self.starts.append(out.json())
            self.runs.append(RunDir(Path(out.json()["run_dir"])))
        for run in self.runs:
            self.spawned[run.id] = []
            self.warnings[run.id] = []

    def next(self, run: RunDir) -> dict[str, Any]:
        out = self.crw("flow", "next", run.id, "--state", str(self.crw.state), "--json")
        assert out.code == 0, out.stderr
        view: dict[str, Any] = out.json()
        self.warnings[run.id] += view.get("warnings", [])
        return view

    def take(self, run: RunDir, step: dict[str, Any]) -> str:
        """Make the step's host call; report nothing. The subagent it names (on v2
        the thread of the child's path, which the returned path names)."""
        call = step["host_call"]
        if call.get("namespace") == "collaboration":
            params = {"parentThreadId": self.owner_thread, **call["arguments"]}
            answer = self.host(V2_METHODS[call["tool"]], params)
            if step["action"] != "spawn":
                return str(call["arguments"]["target"])
            path = str(answer["task_name"])
            self.spawned[run.id].append(self.child(path))
            return path
        if step["action"] == "close":
            self.host("sim/closeAgent", {"target": step["agent_id"]})
            return str(step["agent_id"])
        if step["action"] == "send_input":
            self.host("sim/sendInput", {"target": step["agent_id"], "message": step["message"]})
            return str(step["agent_id"])
        params = {
            "parentThreadId": self.owner_thread,
            "agentType": step["agent_type"],
            "message": step["message"],
        }
        agent = str(self.host("sim/spawnAgent", params)["agentId"])
        self.spawned[run.id].append(agent)
        return agent

    def child(self, path: str) -> str:
        read = self.host("thread/read", {"threadId": self.owner_thread, "includeTurns": True})
        return next(
            str(item["agentThreadId"])
            for turn in read["thread"]["turns"]
            for item in turn["items"]
            if item["type"] == "subAgentActivity" and item["agentPath"] == path
        )

    def dispatched(self, run: RunDir, step: dict[str, Any], agent: str) -> tuple[int, Any]:
        out = self.crw(
            "flow", "dispatched", run.id, step["call"], "--agent", agent,
            "--k", str(step["k"]), "--attempt", str(step["attempt"]),
            "--wait", "20", "--state", str(self.crw.state), "--json",
        )  # fmt: skip
        return out.code, out.json()

    def reap(self) -> None:
        """The host, every command's process, and both runs' processes, by pid."""
        super().reap()
        for run in self.runs:
            for row in read_journal(run.journal).rows:
                if row["row"] == "started":
                    kill(row["pid"])


@dataclass
class SharedOwnerV2(SharedOwner):
    v2: bool = True


@pytest.fixture(params=["v1", "v2"])
def drill(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[SharedOwner]:
    kind = SharedOwnerV2 if request.param == "v2" else SharedOwner
    with served(drill_at(kind, tmp_path)) as made:
        yield made


def refused_reason(drill: SharedOwner, run_b: RunDir, step: dict[str, Any], late: bool) -> str:
    """What `dispatched` answers for run-b's subagent reported to run-a as `step`."""
    if not drill.v2:
        return f"the subagent carries run {run_b.id}'s step"
    marker = f"{step['call']}/t{step['k']}-a{step['attempt']}"
    what = "run's" if late else "step or run's"
    return f"the subagent /root/{task_name(run_b.id, marker)} carries another {what} task name"


def play(drill: SharedOwner) -> None:
    """The owner: once both runs show their first step, take run-b's, report its
    subagent to run-a as run-a's step (refused, exit 1), then take every step of
    both runs, run-b's first each pass, until both ended. Once run-a has gone past
    explore.1, the same report comes again, late: refused, exit 1, not close.
    A pass that took nothing new waits until a file of either run changes (a row,
    a step) before it asks `next` again: a step taken stays in next's answer until
    its run binds it, and asking again meanwhile only starts processes."""
    changes = RunChanges([run.root for run in drill.runs])
    try:
        _play(drill, changes)
    finally:
        changes.close()


def _play(drill: SharedOwner, changes: RunChanges) -> None:
    run_a, run_b = drill.runs
    deadline = time.monotonic() + RUN_DEADLINE
    views = {run.id: drill.next(run) for run in drill.runs}
    while not all(views[run.id]["steps"] for run in drill.runs):
        assert time.monotonic() < deadline, f"no first steps: {views}"
        changes.wait(1.0)
        views = {run.id: drill.next(run) for run in drill.runs}
    (first_b,) = views[run_b.id]["steps"]
    taken = {(run_b.id, first_b["call"], first_b["k"], first_b["attempt"])}
    code, reply = drill.dispatched(run_a, first_b, drill.take(run_b, first_b))
    assert (code, reply["reply"], reply["reason"]) == (
        1,
        "refused",
        refused_reason(drill, run_b, first_b, late=False),
    )
    ended: set[str] = set()
    late = False
    while len(ended) < 2:
        assert time.monotonic() < deadline, f"the runs did not end: {ended}"
        took = False
        for run in (run_b, run_a):
            view = views.get(run.id) or drill.next(run)
            if view["state"] == "ended":
                ended.add(run.id)
            if run is run_a and not late and any(s["call"] != "explore.1" for s in view["steps"]):
                late = True  # run-a's explore.1 ended: the same report comes late
                code, reply = drill.dispatched(run_a, first_b, drill.spawned[run_b.id][0])
                assert (code, reply["reply"], reply["reason"]) == (
                    1,
                    "refused",
                    refused_reason(drill, run_b, first_b, late=True),
                )
            for step in view["steps"]:
                key = (run.id, step["call"], step.get("k"), step.get("attempt"))
                if step["action"] == "close":
                    key = (run.id, "close", step["agent_id"], 0)
                if key not in taken:
                    taken.add(key)
                    drill.take(run, step)
                    took = True
        views = {}
        if not took and len(ended) < 2:
            changes.wait(1.0)
    assert late, "the owner never saw run-a past explore.1"


@pytest.mark.parametrize("case", ["shared_owner-unreported"])
def test_two_runs_on_one_owner_bind_only_their_own_subagents(
    drill: SharedOwner, case: str, found: dict[str, Any]
) -> None:
    """spec: DISP-25, DISP-26, DISP-10, DISP-3, DISP-4, DISP-5, CMD-DISP-6,
    BIND-LINE-22, CMD-NEXT-36"""
    drill.start_both()
    run_a, run_b = drill.runs
    # The second start warned (owner_bound) and did not bind.
    assert any(run_a.id in warning for warning in drill.starts[1]["warnings"])
    play(drill)
    bound = {}
    for run in drill.runs:
        rows = read_journal(run.journal).rows
        assert rows[-1]["row"] == "ended" and rows[-1]["status"] == "completed", rows[-1]
        bound[run.id] = [r["thread_id"] for r in rows if r["row"] == "thread_started"]
        assert sorted(bound[run.id]) == sorted(drill.spawned[run.id])
        calls = sorted(r["call"] for r in rows if r["row"] == "completed")
        assert calls == ["build.1", "explore.1", "review.1"]
        answered = {r["call"]: r["result"] for r in rows if r["row"] == "completed"}
        assert answered["explore.1"] is not None
    assert not set(bound[run_a.id]) & set(bound[run_b.id])
    # The unbound run's next said the owner is bound to the other run.
    assert any(
        f"owner thread {drill.owner_thread} is bound to run {run_a.id}, not to run {run_b.id}"
        in warning
        for warning in drill.warnings[run_b.id]
    )
    found["held"] = "-"
    found["end"] = "both completed, own subagents"
