"""The same count of calls in `status`, `list` and `watch`, on the demo's workflow
(build reviewed once rejected, fixed, accepted) run by real processes on a `crw
host sim serve` host, killed right after the rejecting review and resumed.

Before: status said "calls: 4 of 4 done" while listing 7 calls, watch went 4/4,
4/5, 5/5, and list showed the killed run `waiting_session`, not crashed.
"""

from __future__ import annotations

import json
import shutil
from typing import Any

import pytest

from crw.engine.run.locks import held_process_tokens, run_is_live
from tests.cli.conftest import EXAMPLES
from tests.cli.test_list import listed
from tests.cli.test_show import FOLLOW_END
from tests.cli.test_status_outcome import LOADED, assert_fits_80_columns
from tests.cli.test_watch import Terminal, terminals, watch
from tests.drill.test_crash_drill import Drill, alive, drill_at, served, wait_until

__all__ = ["terminals"]  # the fixture, used by name

REJECTION = {"verdict": "reject", "findings": ["the summary names no file"]}
CALLS = ["explore.1", "plan.1", "build.1", "build.2", "build.3", "build.4", "critique.1"]


class DemoDrill(Drill):
    """The drill on the demo's workflow; build's first review rejects."""

    def __post_init__(self) -> None:
        super().__post_init__()
        shutil.copytree(EXAMPLES / "schemas", self.root / "schemas")
        self.workflow = self.root / "demo.toml"
        shutil.copy(EXAMPLES / "demo.toml", self.workflow)

    def serve(self) -> None:
        super().serve()
        reject = {"seconds": 0.1, "answer": REJECTION}
        self.host("sim/script", {"match": {"marker": "build.2/*"}, "behaviour": reject})


@pytest.fixture
def demo(tmp_path: Any) -> Any:
    with served(drill_at(DemoDrill, tmp_path)) as made:
        yield made


def status(drill: Drill, *args: str) -> Any:
    assert drill.run is not None
    out = drill.crw("flow", "status", drill.run.id, "--state", str(drill.crw.state), *args)
    assert out.code == 0, out.stderr
    return out.json() if "--json" in args else out.stdout.splitlines()


def listed_run(drill: Drill) -> dict[str, Any]:
    assert drill.run is not None
    runs = listed(drill.crw, "--json")["runs"]
    entry: dict[str, Any] = next(e for e in runs if e["run"] == drill.run.id)
    return entry


def kill_after_the_rejection(drill: Drill) -> None:
    """Start the run to be killed right after build.2's rejection is durable, and
    keep the owner from resuming it (the run lock held until the owner pauses)."""
    drill.start("completed@build.2")
    run = drill.run
    assert run is not None
    lock = drill.take_run_lock_once_released(timeout=LOADED)
    try:
        first = next(r for r in drill.rows() if r["row"] == "started")
        wait_until("the killed run process is gone", lambda: not alive(first["pid"]))
        wait_until("its process lock is let go", lambda: held_process_tokens(run) == [])
        drill.pause_owner()
    finally:
        drill.let_run_lock_go(lock)
    assert not run_is_live(run)


def test_a_killed_review_round_is_crashed_and_counted_alike_everywhere(
    demo: DemoDrill, terminals: list[Terminal]
) -> None:
    """spec: CMD-START-1, CMD-START-2 (the views read the run directory only)"""
    kill_after_the_rejection(demo)
    assert demo.run is not None
    run, state = demo.run.id, str(demo.crw.state)
    resume = f"crw flow resume {run} --detach --state {state}"

    view = status(demo, "--json")
    assert (view["state"], view["rows_state"], view["live"]) == ("crashed", "running", False)
    assert [call["call"] for call in view["calls"]] == CALLS[:4]
    # 4 calls done; build's fix, its review and critique's call still to come.
    counted = {"done": 4, "total": 7, "in_flight": 0, "held": 0, "nodes": None}
    assert view["progress"] == counted
    review = next(call for call in view["calls"] if call["call"] == "build.2")
    assert review["review"] == {"of": "build.1", "verdict": "reject", "findings": 1}
    human = status(demo)
    assert human[:2] == [
        f"run {run}: crashed",
        "  its process is gone: no paused or ended row, its rows leave it running",
    ]
    assert "  calls: 4 of 7 done" in human
    assert "    review of build.1: reject (1 finding)" in human
    assert human[-1] == f"      {resume}"

    entry = listed_run(demo)
    assert (entry["state"], entry["calls"], entry["resume"]) == ("crashed", counted, resume)
    lines = listed(demo.crw, env={"COLUMNS": "80"})
    assert lines[1].split()[:4] == [run, "sess", "crashed", "4/7"]
    assert lines[-3:-1] == [f"{run} crashed (its process is gone); go on with:", f"  {resume}"]
    crashed = listed(demo.crw, "--json", "--status", "crashed")["runs"]
    assert [entry["run"] for entry in crashed] == [run]  # the filter knows the state

    code, printed, _ = watch(demo)
    assert code == 1  # no process runs it
    assert printed[-1].startswith(f"-- run {run} crashed: 4/7 calls done, 0 in flight")

    resumed = demo.crw("flow", "resume", run, "--detach", "--state", state, "--json")
    assert resumed.code == 0, resumed.stderr
    wait_until("the resumed process holds the run", lambda: run_is_live(demo.run))
    demo.unpause_owner()
    demo.run_deadline = LOADED
    demo.finish()
    wait_until("the run process lets it go", lambda: not run_is_live(demo.run))

    view = status(demo, "--json")
    assert [call["call"] for call in view["calls"]] == CALLS
    done = {"done": 7, "total": 7, "in_flight": 0, "held": 0,
            "nodes": {"completed": 4, "total": 4}}  # fmt: skip
    assert (view["state"], view["progress"]) == ("ended", done)
    assert listed_run(demo)["calls"] == done
    human = status(demo)
    assert "  calls: 7 of 7 done" in human and "  nodes: 4 of 4 completed" in human
    assert "    review of build.3: accept (0 findings)" in human
    assert_fits_80_columns(human)

    code, printed, _ = watch(demo)
    assert code == 0 and printed[-1].startswith(f"-- run {run} ended: 7/7 calls done, 0 in")
    code, objects, _ = watch(demo, "--json")
    assert [(o["done"], o["total"]) for o in map(json.loads, objects)] == [(7, 7)]
    terminal = Terminal(demo)
    terminals.append(terminal)
    assert terminal.child.wait(timeout=FOLLOW_END) == 0
    wait_until("the frame is read", lambda: "calls done" in terminal.text())
    assert "7/7 calls done" in terminal.text()


def test_a_null_model_calls_schema_error_is_in_status(demo: DemoDrill) -> None:
    """A call whose answer breaks its schema twice (its repair too) ends null_model:
    status names the reason and the schema error, in text and --json."""
    invalid = {"seconds": 0.1, "answer": {"modules": "not a list"}}
    demo.host("sim/script", {"match": {"marker": "explore.1/*"}, "behaviour": invalid})
    demo.start(crash_after=None)
    demo.run_deadline = LOADED
    demo.finish()
    assert demo.run is not None
    wait_until("the run process lets it go", lambda: not run_is_live(demo.run))
    view = status(demo, "--json")
    explore = view["calls"][0]
    assert (explore["state"], explore["reason"]) == ("null_model", "schema_invalid_after_repair")
    assert explore["errors"] == ["$.modules: 'not a list' is not of type 'array'"]
    assert view["progress"]["nodes"] == {"completed": 0, "total": 4}
    human = status(demo)
    at = human.index("    null_model (schema_invalid_after_repair): the error of its last answer:")
    assert human[at + 1] == "      $.modules: 'not a list' is not of type 'array'"
    results = status(demo, "--results", "--json")
    assert results["calls"][0]["errors"] == explore["errors"]
