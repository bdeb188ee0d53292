"""A pause that races a resume, with real processes: the run ends paused.

A session run of one executor call on a `crw host sim serve` host, whose turns
hang until they are interrupted; the drill plays the owner itself (it spawns each
step's subagent on the host and writes its dispatch report), so no `crw flow
next` resumes the run behind its back. Each round: the call's turn runs, the
drill SIGKILLs the run process, then starts `crw flow pause RUN` and `crw flow
resume RUN --detach` as two processes, and asserts that exactly one process
wrote a `started` row after the kill, that it is neither command (the pause
never becomes the run's process), and that the run ends paused with no process
holding it. Then it resumes the run for the next round.

Started at once, the resume launched the run's process in 18 of 20 rounds (the
pause's request reached it) and the pause in 2 (the resume refused: "being
launched by another command"). So the rounds play each interleaving on purpose
(PLAYS): both at once, in either order, twice each (a race either may win); one
command's launch held under way (its process and the run process it launched
SIGSTOPped, as a loaded machine leaves them without CPU) while the other comes:
the resume refused while the pause launches, or the pause's request in the inbox
before the resumed process reads it; and the pause once the resumed process runs,
once each (held, they play the same every time). A round takes 3-7 s (most of it
the start of five Python processes): 7 rounds. Every process is reaped by pid at
teardown (the crash drill's `reap`).

On multi-agent v2 (`RaceV2`: `[features] multi_agent_v2 = true` in the start's and
the host's config.toml) the drill spawns each step's child by its task name and
reports the child's path; the resumed process finds the child through the owner's
thread and interrupts its turn there. It plays the held interleavings only
(PLAYS_V2): what v2 changes is the resumed process's bind and interrupt, which
each held round reaches the same way every time; the race of the two commands'
launches is the same code on either protocol.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from crw.bus import inbox
from crw.bus import steps as bus
from crw.engine.owner.host_call_v2 import close_call_v2, tool_call_v2
from crw.engine.run.locks import is_launching, run_is_live
from crw.engine.run.rundir import RunDir
from crw.journal.replay import replay
from tests.deadlines import LOADED
from tests.drill.changes import RunChanges
from tests.drill.owner import V2_METHODS
from tests.drill.test_crash_drill import Drill, alive, drill_at, kill, served, wait_until

WORKFLOW = """
name = "race"
pool = 1

[[node]]
id = "build"
role = "executor"
task = "Fix the parser."
schema = { type = "object", required = ["summary"], properties = { summary = { type = "string" } } }

[settings]
poll_interval = 0.1
"""
"""`poll_interval`: how soon the interrupted call reads its turn again once the
host was told to stop it (2 s by default, docs/timers.md): each round waited it
out once, a third of the round, for a turn the simulated host ends at once."""
CALL = "build.1"
EXTRA = {"pause": [], "resume": ["--detach"]}
AT_ONCE = [("pause", "resume", "at_once"), ("resume", "pause", "at_once")]
"""Both commands at once, in either order: a race, which either command's launch
may win, so each is played twice."""
HELD = [
    ("pause", "resume", "launching"),  # the resume while the pause's launch is held
    ("resume", "pause", "launching"),  # the pause's request while the resume's launch is held
    ("resume", "pause", "running"),  # the pause once the resumed process wrote its started row
]
"""Interleavings the drill holds on purpose (SIGSTOP, or a wait for the started row):
the same each time they are played, so each is played once."""
PLAYS = [*AT_ONCE, *HELD, *AT_ONCE]
"""Each round's first command, second command, and when the second starts."""
PLAYS_V2 = HELD
"""The rounds on v2: each held interleaving once (3 rounds, about 15 s)."""


def requested(run: RunDir) -> bool:
    """Whether a control request (a pause's) waits in the run's inbox."""
    return any(run.inbox.glob("*.control"))


def children(pid: int) -> list[int]:
    """The pids of the processes whose parent is `pid`."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                stat = (entry / "stat").read_text()
                if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(int(entry.name))
    return found


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
            if self.v2:
                self.own_v2(step)
                continue
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
            if self.v2:
                call = close_call_v2(close)
                params = {"parentThreadId": self.owner_thread, **call["arguments"]}
                self.host(V2_METHODS[call["tool"]], params)
            else:
                self.host("sim/closeAgent", {"target": close.agent_id})
            bus.remove_close(self.run, close.call, close.attempt, close.agent_id)

    def own_v2(self, step: bus.StepFile) -> None:
        """A spawn step's v2 host call, as `crw flow next` spells it; its report
        names the child's path."""
        assert self.run is not None
        call = tool_call_v2(step, self.run.id)
        params = {"parentThreadId": self.owner_thread, **call["arguments"]}
        path = str(self.host(V2_METHODS[call["tool"]], params)["task_name"])
        report = inbox.Report.new(self.run.id, step.call, step.k, step.attempt, path, "drill")
        inbox.write_report(self.run, report)

    def turn_runs(self, after: int) -> dict[str, Any]:
        """Play the owner until a turn of the call starts after row `after`; the
        started row of the process that runs it. It looks again when a file of the
        run changed (a step, a row), not every few ms."""
        assert self.run is not None
        changes = RunChanges([self.run.root])
        deadline = time.monotonic() + LOADED
        try:
            self.own()
            while not any(r["row"] == "turn_started" for r in self.rows()[after:]):
                assert time.monotonic() < deadline, f"timed out waiting until a turn of {CALL} runs"
                changes.wait(0.5)
                self.own()
        finally:
            changes.close()
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

    def started_after(self, seq: int) -> bool:
        return any(r["row"] == "started" for r in self.rows()[seq:])

    @contextlib.contextmanager
    def launch_held(self, command: subprocess.Popen[bytes]) -> Iterator[None]:
        """Once `command`'s launch of the run's process is under way, SIGSTOP it and
        the process it launched; SIGCONT both at the end."""
        assert self.run is not None
        run = self.run
        wait_until("the launch is under way", lambda: is_launching(run) or run_is_live(run), LOADED)
        os.kill(command.pid, signal.SIGSTOP)  # it launches nothing more
        held = [command.pid, *children(command.pid)]
        try:
            for pid in held[1:]:
                os.kill(pid, signal.SIGSTOP)
            yield
        finally:
            for pid in held:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)

    def race(self, first: str, second: str, when: str, dead: int) -> dict[str, Any]:
        """Start `first`, then `second` at once or at the moment `when` names; the
        two commands, by name."""
        assert self.run is not None
        run = self.run
        ran = {first: self.command(first, *EXTRA[first])}
        if when == "running":
            wait_until("the resumed process runs", lambda: self.started_after(dead), LOADED)
        if when != "launching":
            ran[second] = self.command(second, *EXTRA[second])
            return ran
        with self.launch_held(ran[first]):
            ran[second] = self.command(second, *EXTRA[second])
            if second == "resume":  # refused: a launch is under way
                ran[second].wait(timeout=LOADED)
            else:
                wait_until("the pause's request is in the inbox", lambda: requested(run), LOADED)
        return ran


@dataclass
class RaceV2(Race):
    v2: bool = True


@pytest.fixture(params=["v1", "v2"])
def race(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Race]:
    kind = RaceV2 if request.param == "v2" else Race
    with served(drill_at(kind, tmp_path)) as made:
        yield made


def test_a_pause_racing_a_resume_never_runs_the_run_and_it_ends_paused(
    race: Race, found: dict[str, Any]
) -> None:
    """spec: HARV-28, HARV-31, CMD-NEXT-2; on either multi-agent protocol"""
    race.begin()
    assert race.run is not None
    run = race.run.id
    plays = PLAYS_V2 if race.v2 else PLAYS
    rounds = len(plays)
    for round_ in range(rounds):
        victim = race.turn_runs(len(race.rows()))["pid"]
        kill(victim)
        wait_until("the killed process is gone", lambda: not alive(victim))  # noqa: B023
        race.let_go()
        dead = len(race.rows())
        ran = race.race(*plays[round_], dead)
        assert ran["pause"].wait(timeout=60) == 0, (race.root / "crw.stderr").read_text()
        ran["resume"].wait(timeout=60)
        race.let_go()
        rows = race.rows()
        after = [r for r in rows[dead:] if r["row"] == "started"]
        assert len(after) == 1, f"round {round_}: {len(after)} processes started"
        assert after[0]["pid"] not in (ran["pause"].pid, ran["resume"].pid)
        assert replay(rows).state == "paused", f"round {round_}: {rows[-1]}"
        if round_ < rounds - 1:
            resumed = race.crw("flow", "resume", run, "--detach", "--state", str(race.crw.state))
            assert resumed.code == 0, resumed.stderr
    status = race.crw("flow", "status", run, "--state", str(race.crw.state), "--json")
    assert status.json()["state"] == "paused"
    assert not run_is_live(race.run)
    if race.v2:  # every process, the resumed ones from the journal
        assert {r["multi_agent"] for r in rows if r["row"] == "started"} == {"multi_agent_v2"}
    found |= {"point": "running", "stop": f"pause+resume x{rounds}", "held": "paused"}
    found["end"] = "paused, one process a round"
