"""Real processes whose host stops or dies mid-turn: the run pauses host_unavailable.

A `crw host sim serve` process is the host. In the first drill a session run (the
drill's owner process taking the steps) has its host SIGSTOPped while build.1's
subagent turn runs: the connection stays open and nothing answers, so only the
run's probe (once every `host_timeout`, 2 s here, from the workflow's
`[settings]`) can tell; the run must pause host_unavailable within twice
`host_timeout`, and after SIGCONT a resume goes on with the call in place. In the
second an app-server run's host process is SIGKILLed mid-turn: the run must pause
host_unavailable (no call held host_failure), and `status` must say so and name
the resume. Both with `host_wait = 0`: the process exits, and the run waits for
`crw flow resume`. A stopped host is sent SIGCONT before it is killed at teardown.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from crw.engine.run.locks import held_process_tokens
from tests.drill.test_app_server_crash_drill import AppDrill
from tests.drill.test_crash_drill import (
    CALL,
    WORKFLOW,
    D,
    Drill,
    alive,
    drill_at,
    served,
    wait_until,
)

TIMEOUT = 2.0
"""The workflow's host_timeout (s)."""
SLOW_BUILD = {"match": {"marker": f"{CALL}/*"}, "behaviour": {"seconds": 8.0}}
SETTINGS = f"\n[settings]\nhost_timeout = {TIMEOUT}\nhost_wait = 0\n"
"""host_wait = 0: the process exits once the run is paused, waiting for no host
(tests/drill/test_host_back_drill.py has the wait)."""


def host_pid(drill: Drill) -> int:
    """The pid of the drill's `crw host sim serve` process (its first child)."""
    return drill.processes[0].pid


def turn_started(drill: Drill) -> bool:
    return any(r["row"] == "turn_started" and r.get("call") == CALL for r in drill.rows())


def paused_and_gone(drill: Drill) -> list[dict[str, Any]]:
    """The rows once the run paused and its process let the run go."""
    assert drill.run is not None
    run = drill.run
    wait_until("the run pauses", lambda: drill.rows()[-1]["row"] == "paused")
    first = next(r for r in drill.rows() if r["row"] == "started")
    wait_until("the run process is gone", lambda: not alive(first["pid"]))
    wait_until("its process lock is let go", lambda: held_process_tokens(run) == [])
    return drill.rows()


def flow(drill: Drill, *args: str) -> Any:
    assert drill.run is not None
    out = drill.crw("flow", args[0], drill.run.id, *args[1:], "--state", str(drill.crw.state))
    assert out.code == 0, out.stderr
    return out.json() if "--json" in args else out.stdout


def reap_stopped(drill: Drill) -> None:
    """SIGCONT to every child (a stopped one), then the drill's SIGKILL and reap."""
    for child in drill.processes:
        if child.poll() is None:
            os.kill(child.pid, signal.SIGCONT)
    drill.reap()


def timed_drill(kind: type[D], root: Path) -> D:
    """A `kind` drill in `root` whose workflow probes its host every `TIMEOUT`."""
    made = drill_at(kind, root)
    made.workflow.write_text(WORKFLOW + SETTINGS)
    return made


@pytest.fixture
def drill(tmp_path: Path) -> Iterator[Drill]:
    with served(timed_drill(Drill, tmp_path), reap_stopped) as made:
        yield made


@pytest.fixture
def app_drill(tmp_path: Path) -> Iterator[AppDrill]:
    with served(timed_drill(AppDrill, tmp_path), reap_stopped) as made:
        yield made


def test_a_session_run_whose_host_is_stopped_mid_turn_pauses_and_goes_on_after_it(
    drill: Drill,
) -> None:
    """spec: ATT-6 (a real run process: a host that stopped answering is not a
    thread the run cannot read; the run pauses, not "running" for good)"""
    drill.host("sim/script", SLOW_BUILD)
    drill.start(crash_after=None)
    wait_until(f"{CALL}'s turn starts", lambda: turn_started(drill))
    os.kill(host_pid(drill), signal.SIGSTOP)
    # Paused by the probe (its error below), not "running" for good: the wait's
    # deadline is the hang guard. That the probe pauses within host_timeout of a
    # probe is proved under a MockClock (tests/actors/test_host_frozen.py): here
    # the time to the paused row would be the loaded machine's.
    paused = paused_and_gone(drill)
    assert paused[-1]["reason"] == "host_unavailable"
    assert "did not answer thread/loaded/list" in paused[-1]["error"]
    assert [r["row"] for r in paused if r.get("call") == CALL][-1] == "turn_started"
    assert not {"held", "interrupt_requested"} & {r["row"] for r in paused}
    status = flow(drill, "status", "--json")
    assert (status["state"], status["paused"]["reason"]) == ("paused", "host_unavailable")
    assert status["host_wait"] is None

    os.kill(host_pid(drill), signal.SIGCONT)
    flow(drill, "resume", "--detach", "--json")
    rows = drill.finish()
    assert rows[-1]["row"] == "ended" and rows[-1]["status"] == "completed"
    after = rows[len(paused) :]
    assert [r["row"] for r in after if r.get("call") == CALL] == ["completed"]  # in place
    assert "held" not in {r["row"] for r in rows}
    turns, _ = drill.subagent_turns()
    assert {marker: n for marker, n in turns.items() if n > 1} == {}


def test_an_app_server_run_whose_host_dies_mid_turn_pauses_host_unavailable(
    app_drill: AppDrill,
) -> None:
    """spec: HARV-14 (a real run process: a host gone is no turn the host failed;
    the run pauses, no call is held)"""
    app_drill.host("sim/script", SLOW_BUILD)
    app_drill.start(crash_after=None)
    wait_until(f"{CALL}'s turn starts", lambda: turn_started(app_drill))
    app_drill.processes[0].kill()
    app_drill.processes[0].wait(timeout=5)
    paused = paused_and_gone(app_drill)
    assert paused[-1]["reason"] == "host_unavailable"
    assert [r["row"] for r in paused if r.get("call") == CALL][-1] == "turn_started"
    assert "held" not in {r["row"] for r in paused}
    assert app_drill.run is not None
    run = app_drill.run.id
    status = flow(app_drill, "status", "--json")
    assert (status["state"], status["paused"]["reason"]) == ("paused", "host_unavailable")
    resume = f"crw flow resume {run} --detach --state {app_drill.crw.state}"
    assert status["todo"] == [
        {"do": "its host could not be reached (above): start the host, then", "command": resume}
    ]
    human = flow(app_drill, "status")
    assert "host_unavailable" in human and resume in human
