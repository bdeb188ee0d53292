"""The App Server crash drill: real processes, a run killed after each row of a
repaired call, resumed in place.

A `crw host sim serve` process is the shared host, so a turn goes on while no run
process watches it; an app-server run is started with
`CRW_CRASH_AFTER=<row>@build.1[#n]` (the detached run process SIGKILLs itself
right after that row is durable) and, once the process is gone, resumed with
`crw flow resume RUN --detach`. build.1's turns take a second, so the resumed
process meets them running (a kill right after turn_started) or never started (a
kill right after step_published or thread_started). Every kill point must end as
the undisturbed run does: completed, every call's result the same,
build.1's rows those of the undisturbed call, and no turn sent twice for one
marker on the host.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from crw.engine.run.locks import held_process_tokens
from crw.engine.run.rundir import RunDir
from crw.engine.steps.bind import turn_marker
from crw.host.connect import connect_host
from crw.host.uri import parse_host_uri
from tests.drill.test_crash_drill import RUN_DEADLINE, Drill, alive, drill_at, served, wait_until

CALL = "build.1"
SLOW_BUILD = {"match": {"marker": f"{CALL}/*"}, "behaviour": {"seconds": 1.0, "invalidFirst": True}}
REPAIRED = [
    "prepared",
    "step_published",
    "thread_started",
    "turn_started",
    "step_published",
    "turn_started",
    "completed",
]


async def _turns_by_marker(socket: Path) -> Counter[str]:
    """Every turn of the host's interactive threads (one per App Server call),
    counted by the marker of its first user message."""
    async with connect_host(parse_host_uri(f"unix:{socket}")) as client:
        counts: Counter[str] = Counter()
        listed, _ = await client.thread_list(limit=100)
        for thread in listed:
            read = await client.request("thread/read", {"threadId": thread.id})
            if read["thread"]["preview"]:  # a thread with turns (the owner has none)
                full = await client.thread_read(thread.id, include_turns=True)
                counts.update(turn_marker(turn) or "<none>" for turn in full.turns)
        return counts


class AppDrill(Drill):
    """A Drill whose run is on the app-server backend: no owner plays."""

    def serve(self) -> None:
        super().serve()
        self.host("sim/script", SLOW_BUILD)

    def start(self, crash_after: str | None) -> None:
        env = self.crw.env | ({"CRW_CRASH_AFTER": crash_after} if crash_after else {})
        out = self.crw.start(
            str(self.workflow), "--backend", "app-server", "--host", f"unix:{self.socket}",
            env=env,
        )  # fmt: skip
        assert out.code == 0, out.stderr
        self.run = RunDir(Path(out.json()["run_dir"]))

    def finish(self) -> list[dict[str, Any]]:
        def ended() -> bool:
            rows = self.rows()
            return bool(rows) and rows[-1]["row"] == "ended"

        wait_until("the run ends", ended, RUN_DEADLINE)
        return self.rows()

    def turns_by_marker(self) -> Counter[str]:
        return trio.run(_turns_by_marker, self.socket)


def outcome(rows: list[dict[str, Any]]) -> dict[str, Any]:
    return {r["call"]: r["result"] for r in rows if r["row"] == "completed"}


@pytest.fixture
def drill(tmp_path: Path) -> Iterator[AppDrill]:
    with served(drill_at(AppDrill, tmp_path / "run")) as made:
        yield made


pytestmark = pytest.mark.xdist_group("test_app_server_crash_drill")
"""One xdist worker runs the whole module: its tests share the module's costly set-up."""


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The results of the undisturbed run of the same workflow."""
    with served(drill_at(AppDrill, tmp_path_factory.mktemp("reference") / "run")) as ran:
        ran.start(crash_after=None)
        rows = ran.finish()
    assert (
        rows[-1]["status"] == "completed"
        and [r["row"] for r in rows if r.get("call") == CALL] == REPAIRED
    )
    return outcome(rows)


KILL_POINTS = [
    pytest.param(f"prepared@{CALL}", id="prepared+step_published"),
    pytest.param(f"thread_started@{CALL}", id="thread_started"),
    pytest.param(f"turn_started@{CALL}", id="turn_started"),
    pytest.param(f"step_published@{CALL}#2", id="step_published#2"),
    pytest.param(f"turn_started@{CALL}#2", id="turn_started#2"),
    pytest.param(f"completed@{CALL}", id="completed"),
]


@pytest.mark.parametrize("crash_after", KILL_POINTS)
def test_an_app_server_run_killed_at_any_row_resumes_in_place(
    drill: AppDrill, reference: dict[str, Any], crash_after: str
) -> None:
    """spec: STEP-57, STEP-59, STEP-60 (a call an earlier process left open is
    followed on its resumed thread, never held process_lost, no turn sent twice)"""
    drill.start(crash_after)
    run = drill.run
    assert run is not None
    wait_until("the kill point fires", lambda: any(r["row"] == "started" for r in drill.rows()))
    first = next(r for r in drill.rows() if r["row"] == "started")
    wait_until("the killed run process is gone", lambda: not alive(first["pid"]))
    wait_until("its process lock is let go", lambda: held_process_tokens(run) == [])
    dead = drill.rows()
    assert dead[-1]["row"] != "ended", "the kill point never fired"
    resumed = drill.crw("flow", "resume", run.id, "--detach", "--state", str(drill.crw.state),
                        "--json")  # fmt: skip
    assert resumed.code == 0, resumed.stderr
    rows = drill.finish()
    assert rows[-1]["status"] == "completed"
    assert outcome(rows) == reference
    assert [r["row"] for r in rows if r.get("call") == CALL] == REPAIRED
    assert "held" not in {r["row"] for r in rows}
    turns = drill.turns_by_marker()
    assert set(turns.values()) == {1}, f"turns sent twice for one marker: {turns}"
    assert turns[f"{CALL}/t1-a1"] == turns[f"{CALL}/t2-a1"] == 1
