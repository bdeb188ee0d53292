"""The interrupt drills with real processes: a `crw host sim serve` host, a session
run's process, the process-level owner (`tests.drill.owner`) and the commands.

The run process is started with `CRW_CRASH_AFTER` (the crash drill's kill point),
so it SIGKILLs itself right after the stop's first row is durable: the interrupt's
intent (`interrupt_requested`, before the interrupt is sent), or, for a call the
host already answered, right after its turn was bound. What a person does next is
what the drill does: the `crw flow pause`/`cancel` that waited launches the
process of the run no process holds, which stops it, a deadline's hold is
answered with `crw flow answer --retry`, a pause is followed by `crw flow
resume`. Each drill asserts the stop's rows, that no marker was turned twice on
the host, that every subagent was closed, and that the run ends with the results
of the same workflow run undisturbed. Every process is reaped by pid at teardown
(the crash drill's `reap`).

On multi-agent v2 (`KillDrillV2`: `[features] multi_agent_v2 = true` in the
start's and the host's config.toml, the owner taking next's v2 host calls) the
drills run the cases where v2 changes what the resumed process does (CASES_V2):
it finds a child spawned by task name (running-cancel), a follow-up's turn
(repair-pause) and a turn the host answered while no process ran (answered-pause)
through the owner's thread, and interrupts there. The deadline and the review
round stop the turn as the pause does (the same bind and interrupt), so they are
not played again.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from crw.engine.run.locks import run_is_live
from tests.drill.references import undisturbed
from tests.drill.test_crash_drill import (
    DEADLINE,
    WORKFLOW,
    Drill,
    drill_at,
    results,
    served,
    wait_until,
)

REVIEWED = WORKFLOW.replace(
    'task = "Fix it, starting from {explore.files}."\n',
    'task = "Fix it, starting from {explore.files}."\nreview = { role = "reviewer", rounds = 1 }\n',
)
REJECT = {"verdict": "reject", "findings": ["name the files"]}
TIMEOUTS = (10, 30, 90)
"""The build node's deadline, in seconds, in the deadline drill, tried in turn. It
counts from the call's start, and the drill proves the interrupt of a bound turn,
so it must outlast the call's worktree, its step, the owner's spawn (a `crw flow
next` and a `crw flow dispatched`, each a Python process) and the bind: 1-2 s on a
quiet machine, 8 s and more under load. A deadline reached before the bind holds
the call with no interrupt_requested, as the spec says (a spawn step no subagent
was bound to has no turn to interrupt): the drill then plays the case again on a
fresh drill with the next, longer deadline. So a quiet machine waits 10 s for the
deadline, not the 30 s a loaded one needs, and no load fails the drill."""
TIMEOUT = TIMEOUTS[0]
"""The deadline a drill whose hold need not follow a bind gives its build node."""
QUICK = {"seconds": 0.1}


@dataclass(frozen=True)
class Case:
    point: str
    stop: str
    call: str = "build.1"

    @property
    def kill(self) -> str:
        """The kill point: the row right after which the run process dies."""
        kind = "turn_started" if self.point == "answered" else "interrupt_requested"
        return f"{kind}@{self.call}"

    @property
    def k(self) -> int:
        """The k of the turn the stop reaches."""
        return 2 if self.point == "repair" else 1


CASES = [
    Case("running", "pause"),
    Case("running", "cancel"),
    Case("running", "timeout"),
    Case("repair", "pause"),
    Case("answered", "pause"),
    Case("review", "pause", call="build.3"),
]
CASES_V2 = [Case("running", "cancel"), Case("repair", "pause"), Case("answered", "pause")]
"""The cases played on v2 too: a spawned child's, a follow-up's and an answered
turn's bind and interrupt by a resumed process (each some 10-15 s)."""
PARAMS = [
    pytest.param(case, protocol, id=f"{case.point}-{case.stop}-{protocol}")
    for protocol, cases in (("v1", CASES), ("v2", CASES_V2))
    for case in cases
]


@dataclass
class KillDrill(Drill):
    run_deadline: float = 60.0
    timeout: int = TIMEOUTS[0]
    """The build node's deadline in a deadline case."""

    def script(self, case: Case | None, reviewed: bool) -> None:
        """The workflow and the host's scripts; `case` None: undisturbed."""
        text = REVIEWED if reviewed else WORKFLOW
        if case is not None and case.stop == "timeout":
            deadline = f'role = "executor"\ntimeout = {self.timeout}\n'
            text = text.replace('role = "executor"\n', deadline)
        self.workflow.write_text(text)
        scripts: list[tuple[str, dict[str, Any]]] = [("build.1/*", QUICK)]  # no invalid first
        if reviewed:
            scripts.append(("build.2/*", {**QUICK, "answer": REJECT}))
        if case is not None and case.point == "repair":
            scripts += [("build.1/t1-*", {**QUICK, "invalidFirst": True}),
                        ("build.1/t2-a1", {"hang": True})]  # fmt: skip
        elif case is not None:
            seconds = {"seconds": 2} if case.point == "answered" else {"hang": True}
            scripts.append((f"{case.call}/t1-a1", seconds))
        for marker, behaviour in scripts:
            self.host("sim/script", {"match": {"marker": marker}, "behaviour": behaviour})

    def command(self, *args: str) -> dict[str, Any]:
        assert self.run is not None
        out = self.crw("flow", *args, "--state", str(self.crw.state), "--json")
        assert out.code == 0, out.stderr
        made: dict[str, Any] = out.json()
        return made


@dataclass
class KillDrillV2(KillDrill):
    v2: bool = True


@pytest.fixture
def drill(tmp_path: Path, multi_agent: str) -> Iterator[KillDrill]:
    kind = KillDrillV2 if multi_agent == "v2" else KillDrill
    with served(drill_at(kind, tmp_path)) as made:
        yield made


@pytest.fixture
def fresh(tmp_path: Path, multi_agent: str) -> Iterator[Callable[[str], KillDrill]]:
    """Another drill of `drill`'s kind, in `tmp_path/<name>`, served and reaped alike."""
    kind = KillDrillV2 if multi_agent == "v2" else KillDrill
    with contextlib.ExitStack() as drills:
        yield lambda name: drills.enter_context(served(drill_at(kind, tmp_path / name)))


pytestmark = pytest.mark.xdist_group("test_kill_drills")
"""One xdist worker runs the whole module: its tests share the module's costly set-up."""


def _undisturbed(reviewed: bool) -> Callable[[Path], dict[str, Any]]:
    def make(root: Path) -> dict[str, Any]:
        with served(drill_at(KillDrill, root)) as ran:
            ran.script(None, reviewed)
            ran.start(crash_after=None)
            rows = ran.finish()
        assert rows[-1]["row"] == "ended" and rows[-1]["status"] == "completed"
        return results(rows)

    return make


@dataclass
class References:
    """The results of each workflow run undisturbed, `[reviewed]`: each made when a
    drill first asks for it, once a session (tests/drill/references.py), so a
    module whose drills are all on the plain workflow never runs the reviewed one."""

    tmp_path_factory: pytest.TempPathFactory

    def __getitem__(self, reviewed: bool) -> dict[str, Any]:
        key = "kill-reviewed" if reviewed else "kill-plain"
        return dict(undisturbed(key, _undisturbed(reviewed), self.tmp_path_factory))


@pytest.fixture(scope="module")
def references(tmp_path_factory: pytest.TempPathFactory) -> References:
    """The results of each workflow (plain, reviewed) run undisturbed."""
    return References(tmp_path_factory)


def kinds(rows: list[dict[str, Any]], call: str) -> list[str]:
    return [r["row"] for r in rows if r.get("call") == call]


def dead(drill: KillDrill) -> list[dict[str, Any]]:
    """Wait until the run process killed itself; the rows it left."""
    assert drill.run is not None
    started = [r for r in drill.rows() if r["row"] == "started"]
    wait_until("the killed run process lets its run go", lambda: not run_is_live(drill.run))
    rows = drill.rows()
    assert [r for r in rows if r["row"] == "started"] == started
    return rows


def at_point(drill: KillDrill, case: Case, within: float = DEADLINE) -> None:
    def there() -> bool:
        rows = drill.rows()
        return any(
            r["row"] == "turn_started" and r["call"] == case.call and r["k"] == case.k for r in rows
        )

    wait_until(f"{case.call} runs turn {case.k}", there, within)


def bound_first(drill: KillDrill, case: Case) -> bool:
    """Wait until the call's turn is bound (True) or the call is held first (False:
    its deadline ran out before the bind)."""
    seen: list[bool] = []

    def either() -> bool:
        for r in drill.rows():
            if r.get("call") == case.call and r["row"] in ("turn_started", "held"):
                seen.append(r["row"] == "turn_started")
                return True
        return False

    wait_until(f"{case.call} is bound or held", either)
    return seen[0]


def started(drill: KillDrill, case: Case, fresh: Callable[[str], KillDrill]) -> KillDrill:
    """The drill whose run was started with the case's kill point; in a deadline
    case, the first whose deadline ran out after the bind (TIMEOUTS)."""
    for timeout in TIMEOUTS:
        drill.timeout = timeout
        drill.script(case, case.point == "review")
        drill.start(crash_after=case.kill)
        if case.stop != "timeout" or bound_first(drill, case):
            return drill
        drill.reap()  # held before its bind: a longer deadline, on a fresh drill
        drill = fresh(f"deadline-{timeout}")
    raise AssertionError(f"{case.call} was held before its bind with a {timeout} s deadline")


def stop(drill: KillDrill, case: Case) -> dict[str, Any] | None:
    """Stop the run as a person does; the command's answer, if a command stopped it."""
    assert drill.run is not None
    run = drill.run.id
    if case.stop == "timeout" or case.point == "answered":
        # The run process dies by itself (after the deadline's intent, or once the
        # answered turn is bound), and the owner's next resumes a run no process
        # holds: the drill holds the run lock from the moment the killed process
        # lets it go until the owner is paused.
        # In a deadline case the turn is bound (`started`) and runs until the deadline.
        lock = drill.take_run_lock_once_released(drill.timeout + DEADLINE)
        try:
            if case.stop != "timeout":
                at_point(drill, case)
            drill.pause_owner()
        finally:
            drill.let_run_lock_go(lock)
        dead(drill)
    if case.stop == "timeout":
        drill.command("resume", run)
        wait_until("the resumed process leaves", lambda: not run_is_live(drill.run))
        return None
    if case.point == "answered":
        wait_until(  # each look reads every subagent on the host: 5 a second, not 50
            "the host answers the turn",
            lambda: "active" not in drill.subagent_turns()[1].values(),
            every=0.2,
        )
    else:
        at_point(drill, case)
        drill.pause_owner()  # the stop needs no owner; its next would resume the run
    return drill.command(case.stop, run, "--wait", "60")


def go_on(drill: KillDrill, case: Case) -> list[dict[str, Any]]:
    """After the stop, what a person does; the rows once the run ended."""
    assert drill.run is not None
    run = drill.run.id
    drill.unpause_owner()
    if case.stop == "timeout":
        answered = drill.command("answer", run, case.call, "--retry")
        drill.crw.pids.append(answered["resumed_pid"])
    elif case.stop == "pause":
        drill.command("resume", run, "--detach")
    return drill.finish()


@pytest.mark.parametrize(("case", "multi_agent"), PARAMS)
def test_a_run_killed_as_it_stops_a_call_ends_as_the_undisturbed_run(
    drill: KillDrill,
    fresh: Callable[[str], KillDrill],
    references: References,
    case: Case,
    multi_agent: str,
    found: dict[str, Any],
) -> None:
    """spec: HARV-28..31, HARV-35, HARV-37, HARV-38, ROWS-6, ATT-30, CMD-NEXT-2; on v2
    the same rows and results (the reference is the v1 run's: the host answers by
    marker)"""
    reviewed = case.point == "review"
    drill = started(drill, case, fresh)
    answer = stop(drill, case)
    rows = drill.rows()
    reason = {"pause": "paused", "cancel": "cancelled", "timeout": "deadline"}[case.stop]
    mine = kinds(rows, case.call)
    assert mine[-2:] == ["interrupt_requested", "held"], mine
    assert mine.count("interrupt_requested") == 1
    held = [r for r in rows if r["row"] == "held" and r["call"] == case.call][-1]
    assert held["reason"] == reason
    found["held"] = reason
    if answer is not None:
        assert answer["via"] == "launched" and answer["held"] == [case.call], answer
        assert rows[-1]["row"] == ("paused" if case.stop == "pause" else "ended")
    rows = go_on(drill, case)
    turns, status = drill.subagent_turns()
    assert {marker: n for marker, n in turns.items() if n > 1} == {}
    if drill.v2:  # an idle v2 child holds no slot and is closed by none
        assert {agent: s for agent, s in status.items() if s == "active"} == {}
        assert {r["multi_agent"] for r in rows if r["row"] == "started"} == {"multi_agent_v2"}
    else:
        assert {agent: s for agent, s in status.items() if s != "notLoaded"} == {}
    if case.stop == "cancel":
        assert rows[-1]["row"] == "ended" and rows[-1]["status"] == "cancelled"
        found["end"] = "cancelled"
        return
    assert rows[-1]["row"] == "ended" and rows[-1]["status"] == "completed"
    assert results(rows) == references[reviewed]
    found["end"] = "completed, same results"
