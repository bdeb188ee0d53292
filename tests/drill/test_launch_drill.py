"""The launch drill: real processes, a run process SIGKILLed again and again while
owners keep calling `crw flow next`.

A `crw host sim serve` process is the host; a session run of three chained calls
(the middle one repaired) runs with slow turns. The owner is `tests.drill.
launch_owner`, which takes every step `next` offers (it remembers none), and a
second loop calls `next` as fast as it can. The drill kills the run's process a
few times, each once it has run a while; `next` resumes it. Then:

- each kill brings at most one new process: one started row and one resumed_pid
  per kill, never a storm of launches;
- the run ends as the uninterrupted run does, and no marker has two subagents on
  the host: no answer of `next` after a resume handed out a step the run had
  already sent (the old step of a dead process, or one whose report waited);
- a process launched for the ended run writes no row.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from crw.engine.run.rundir import RunDir
from tests.drill.test_crash_drill import (
    CALL,
    Drill,
    alive,
    drill_at,
    host_listens,
    kill,
    results,
    served,
    wait_until,
)

SLOW = [
    {"match": {"marker": "*"}, "behaviour": {"seconds": 0.8}},
    {"match": {"marker": f"{CALL}/*"}, "behaviour": {"seconds": 0.8, "invalidFirst": True}},
]
KILLS = 3
UP_BEFORE_KILL = 1.0
"""Seconds a process runs before the drill kills it."""
RUN_DEADLINE = 90.0


class LaunchDrill(Drill):
    def serve(self) -> None:
        self.spawn("crw", "host", "sim", "serve", "--socket", str(self.socket),
                   "--codex-home", str(self.root / "sim-home"))  # fmt: skip
        wait_until("the sim host listens", lambda: trio.run(host_listens, self.socket))
        self.owner_thread = str(self.host("sim/startOwner", {})["threadId"])
        for script in SLOW:
            self.host("sim/script", script)

    def start(self, crash_after: str | None = None) -> None:
        out = self.crw.start(
            str(self.workflow), "--owner", self.owner_thread, "--host", f"unix:{self.socket}"
        )
        assert out.code == 0, out.stderr
        self.run = RunDir(Path(out.json()["run_dir"]))
        self.owner = self.spawn(
            "tests.drill.launch_owner", self.run.id, "--state", str(self.crw.state),
            "--socket", str(self.socket), "--owner", self.owner_thread,
            "--control", str(self.control),
        )  # fmt: skip

    def started(self) -> list[dict[str, Any]]:
        return [row for row in self.rows() if row["row"] == "started"]

    def ended(self) -> bool:
        return any(row["row"] == "ended" for row in self.rows())


class Poller:
    """Calls `crw flow next RUN --json` in a loop until stopped; keeps every
    resumed_pid it was answered."""

    def __init__(self, drill: LaunchDrill) -> None:
        assert drill.run is not None
        self.argv = [sys.executable, "-m", "crw", "flow", "next", drill.run.id,
                     "--state", str(drill.crw.state), "--json"]  # fmt: skip
        self.env = drill.crw.env
        self.resumed: list[int] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.loop, daemon=True)

    def loop(self) -> None:
        while not self.stop.is_set():
            done = subprocess.run(
                self.argv,
                env=self.env,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            with contextlib.suppress(ValueError):
                pid = json.loads(done.stdout).get("resumed_pid")
                if isinstance(pid, int):
                    self.resumed.append(pid)


@pytest.fixture
def drill(tmp_path: Path) -> Iterator[LaunchDrill]:
    with served(drill_at(LaunchDrill, tmp_path)) as made:
        yield made


def owner_resumed(drill: LaunchDrill) -> list[int]:
    lines = (drill.control / "owner.jsonl").read_text().splitlines()
    outs = [json.loads(line).get("out", {}) for line in lines]
    return [out["resumed_pid"] for out in outs if "resumed_pid" in out]


def kill_while_owners_call_next(drill: LaunchDrill, poller: Poller) -> int:
    """Kill the run's newest process KILLS times, each after it ran a while; the
    number of kills made (fewer when the run ends first)."""
    kills = 0
    for _ in range(KILLS):
        time.sleep(UP_BEFORE_KILL)
        if drill.ended():
            break
        count = len(drill.started())
        newest = drill.started()[-1]["pid"]
        kill(newest)
        kills += 1
        wait_until("the killed process is gone", lambda n=newest: not alive(n))
        wait_until(
            "next resumes the run", lambda c=count: len(drill.started()) > c or drill.ended()
        )
    return kills


def test_kills_under_owners_calling_next_bring_one_process_each_and_no_duplicate(
    drill: LaunchDrill,
) -> None:
    """spec: CMD-NEXT-18, CMD-NEXT-28, CMD-NEXT-30, ATT-18, ATT-19, ATT-21"""
    drill.start()
    poller = Poller(drill)
    poller.thread.start()
    try:
        kills = kill_while_owners_call_next(drill, poller)
        assert drill.owner is not None
        drill.owner.wait(timeout=RUN_DEADLINE)
    finally:
        poller.stop.set()
        poller.thread.join(timeout=60)
    rows = drill.rows()
    assert rows[-1]["row"] == "ended" and rows[-1]["status"] == "completed"
    assert set(results(rows)) == {"explore.1", "build.1", "review.1"}
    assert kills >= 2, "the run ended before the drill could kill it"
    launched = set(poller.resumed) | set(owner_resumed(drill))
    started = [row["pid"] for row in rows if row["row"] == "started"]
    assert len(launched) <= kills, f"{len(launched)} launches for {kills} kills"
    assert len(started) <= kills + 1, f"{len(started)} processes for {kills} kills"
    turns, _status = drill.subagent_turns()
    twice = {marker: n for marker, n in turns.items() if n > 1}
    assert twice == {}, f"a step handed out again after a resume: {twice}"
    # A late process for the ended run writes nothing.
    assert drill.run is not None
    before = drill.run.journal.read_bytes()
    late = drill.crw("flow", "_run", drill.run.id, "--state", str(drill.crw.state))
    assert late.code == 1 and "has ended" in late.stderr
    assert drill.run.journal.read_bytes() == before
    assert sum(row["row"] == "ended" for row in drill.rows()) == 1
