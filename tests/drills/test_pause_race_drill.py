"""A pause that races a resume, with real processes: the run ends paused.

A session run of one executor call on a `crw host sim serve` host, whose turns
hang until they are interrupted; the drill plays the owner itself (it spawns each
step's subagent on the host and writes its dispatch report), so no `crw flow
next` resumes the run behind its back. Each round: the call's turn runs, the
drill SIGKILLs the run process, then starts `crw flow pause RUN` and `crw flow
resume RUN --detach` at once as two processes (in one order on even rounds, the
other on odd ones, so either can launch first), and asserts that exactly one
process wrote a `started` row after the kill, that it is neither command (the
pause never becomes the run's process), and that the run ends paused with no
process holding it. Then it resumes the run for the next round. A round takes
4-7 s on 2 cores (most of it the start of five Python processes): 20 rounds,
80-140 s. Every process is reaped by pid at teardown (the crash drill's `reap`).
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from crw.bus import inbox
from crw.bus import steps as bus
from crw.engine.run.locks import is_launching, run_is_live
from crw.engine.run.rundir import RunDir
from crw.journal.replay import replay
from tests.drill.test_crash_drill import Drill, alive, drill_at, kill, served, wait_until

ROUNDS = 20
WORKFLOW = """
name = "race"
pool = 1

[[node]]
id = "build"
role = "executor"
task = "Fix the parser."
schema = { type = "object", required = ["summary"], properties = { summary = { type = "string" } } }
"""
CALL = "build.1"
EXTRA = {"pause": [], "resume": ["--detach"]}


@dataclass
class Race(Drill):
    """The drill's run, whose owner the drill plays."""

    taken: set[tuple[str, int, int]] = field(default_factory=set)

    def begin(self) -> None:
        self.workflow.write_text(WORKFLOW)
        self.host("sim/script", {"match": {"marker": f"{CALL}/*"}, "behaviour": {"hang": True}})
        out = self.crw.start(
            str(self.workflow), "--owner", self.owner_thread, "--host", f"unix:{self.socket}"
        )
        assert out.code == 0, out.stderr
        self.run = RunDir(Path(out.json()["run_dir"]))

    def own(self) -> None:
        """Take each step once (spawn its subagent, report it) and close the
        subagents of the close steps, as an owner does."""
        assert self.run is not None
        for step in bus.list_steps(self.run):
            key = (step.call, step.k, step.attempt)
            if key in self.taken or step.action != "spawn":
                continue
            self.taken.add(key)
            spawned = self.host(
                "sim/spawnAgent",
                {
                    "parentThreadId": self.owner_thread,
                    "agentType": step.agent_type,
                    "message": step.message,
                },
            )
            report = inbox.Report.new(
                self.run.id, step.call, step.k, step.attempt, spawned["agentId"], "drill"
            )
            inbox.write_report(self.run, report)
        for close in bus.list_closes(self.run):
            self.host("sim/closeAgent", {"target": close.agent_id})
            bus.remove_close(self.run, close.call, close.attempt, close.agent_id)

    def turn_runs(self, after: int) -> dict[str, Any]:
        """Play the owner until a turn of the call starts after row `after`; the
        started row of the process that runs it."""

        def runs() -> bool:
            self.own()
            return any(r["row"] == "turn_started" for r in self.rows()[after:])

        wait_until(f"a turn of {CALL} runs", runs)
        started: dict[str, Any] = [r for r in self.rows() if r["row"] == "started"][-1]
        return started

    def command(self, *args: str) -> subprocess.Popen[bytes]:
        assert self.run is not None
        return self.spawn("crw", "flow", *args, self.run.id, "--state", str(self.crw.state))

    def let_go(self) -> None:
        assert self.run is not None
        run = self.run
        wait_until("no process holds the run", lambda: not run_is_live(run))
        wait_until("no launch is under way", lambda: not is_launching(run))


@pytest.fixture
def race(tmp_path: Path) -> Iterator[Race]:
    with served(drill_at(Race, tmp_path)) as made:
        yield made


def test_a_pause_racing_a_resume_never_runs_the_run_and_it_ends_paused(
    race: Race, found: dict[str, Any]
) -> None:
    """spec: HARV-28, HARV-31, CMD-NEXT-2"""
    race.begin()
    assert race.run is not None
    run = race.run.id
    for round_ in range(ROUNDS):
        victim = race.turn_runs(len(race.rows()))["pid"]
        kill(victim)
        wait_until("the killed process is gone", lambda: not alive(victim))  # noqa: B023
        race.let_go()
        dead = len(race.rows())
        first, second = ("pause", "resume") if round_ % 2 == 0 else ("resume", "pause")
        ran = {name: race.command(name, *EXTRA[name]) for name in (first, second)}
        assert ran["pause"].wait(timeout=60) == 0, (race.root / "crw.stderr").read_text()
        ran["resume"].wait(timeout=60)
        race.let_go()
        rows = race.rows()
        after = [r for r in rows[dead:] if r["row"] == "started"]
        assert len(after) == 1, f"round {round_}: {len(after)} processes started"
        assert after[0]["pid"] not in (ran["pause"].pid, ran["resume"].pid)
        assert replay(rows).state == "paused", f"round {round_}: {rows[-1]}"
        if round_ < ROUNDS - 1:
            resumed = race.crw("flow", "resume", run, "--detach", "--state", str(race.crw.state))
            assert resumed.code == 0, resumed.stderr
    status = race.crw("flow", "status", run, "--state", str(race.crw.state), "--json")
    assert status.json()["state"] == "paused"
    assert not run_is_live(race.run)
    found |= {"point": "running", "stop": f"pause+resume x{ROUNDS}", "held": "paused"}
    found["end"] = "paused, one process a round"
