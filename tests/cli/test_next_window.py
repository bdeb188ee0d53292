"""`crw flow next`'s windows, on run directories built by hand, next called in this
process with a clock whose sleep only moves the time on: a starting run is read
again up to 15 s whatever --wait says, a new holder has 15 s to bind the owner's
line; and the warnings about the holder, which next records nothing about."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from crw.cli.owner import next as next_module
from crw.engine.run.locks import hold_run, run_lock, start_lock, take_process_lock
from crw.engine.run.rundir import RunDir
from crw.journal.log import read_journal
from tests.cli.conftest import Crw, wait_for_exit
from tests.cli.test_next import RUN, _append_rows, _make_run, bind_line

DIGEST = "sha256:" + "a" * 64
PINS = {
    "architect": {"agent_type": "architect", "model": "m-arch"},
    "executor": {"agent_type": "executor", "model": "m-exec", "effort": "high"},
    "executor-t1": {"agent_type": "executor"},
    "reviewer": {"agent_type": "reviewer"},
    "explorer": {"agent_type": "explorer"},
    "critic": {"agent_type": "reviewer"},
}
PINS_TOML = (
    '[architect]\nmodel = "m-arch"\n[executor]\nmodel = "m-exec"\neffort = "high"\n'
    '[critic]\nagent_type = "reviewer"\n'
)
LINE = {"kind": "orchestrator", "run_id": RUN, "policyDigest": DIGEST, "helperPairs": PINS}


class FakeClock:
    """Monotonic and wall time that move only when next sleeps; `at(t, do)` runs
    `do` once the time reaches t seconds."""

    def __init__(self) -> None:
        self.elapsed = 0.0
        self.base = time.time_ns()
        self.reads = 0
        self.events: list[tuple[float, Callable[[], object]]] = []

    def at(self, seconds: float, do: Callable[[], object]) -> None:
        self.events.append((seconds, do))

    def sleep(self, seconds: float) -> None:
        self.elapsed += seconds
        self.reads += 1
        due = [event for event in self.events if event[0] <= self.elapsed]
        self.events = [event for event in self.events if event[0] > self.elapsed]
        for _, do in due:
            do()

    def clock(self) -> next_module.Clock:
        return next_module.Clock(
            monotonic=lambda: self.elapsed,
            sleep=self.sleep,
            time_ns=lambda: self.base + int(self.elapsed * 1e9),
        )


def _next(
    crw: Crw, clock: FakeClock, capsys: pytest.CaptureFixture[str], wait: float = 0
) -> dict[str, Any]:
    code = next_module.next_command(
        RUN, wait=wait, state=str(crw.state), json=True, clock=clock.clock()
    )
    assert code == 0
    answer: dict[str, Any] = json.loads(capsys.readouterr().out)
    return answer


@pytest.fixture
def holder(crw: Crw) -> Iterator[tuple[RunDir, str]]:
    """A run this test process holds, its started row just recorded with PINS (its
    lock taken now), the owner's line not bound yet."""
    run = _make_run(crw)
    (crw.state / "roles.toml").write_text(PINS_TOML)
    with hold_run(run) as process:
        assert process is not None
        started = {"row": "started", "backend": "session", "process": process.token}
        _append_rows(run, started | {"role_pairs": PINS, "policy_digest": DIGEST})
        yield run, process.token


def _owner_file(crw: Crw) -> Path:
    return crw.state / "flow-bound" / "owner-thread.jsonl"


def test_a_new_holder_is_read_again_until_it_binds_the_owners_line(
    crw: Crw, holder: tuple[RunDir, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """spec: CMD-NEXT-33: answered once the line is the holder's, with no warning."""
    run, _ = holder
    bind_line(crw, {"kind": "closed", "run_id": RUN})  # the line an earlier process closed
    clock = FakeClock()
    clock.at(2.0, lambda: bind_line(crw, LINE))
    before = run.journal.read_bytes()
    answer = _next(crw, clock, capsys)
    assert 2.0 <= clock.elapsed < 2.0 + 2 * next_module.POLL
    assert (answer["state"], answer["warnings"]) == ("running", [])
    assert answer["spawn_formats"][1]["model"] == "m-exec"
    assert run.journal.read_bytes() == before


def test_a_holder_that_never_binds_is_reported_as_it_is_after_the_window(
    crw: Crw, holder: tuple[RunDir, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """spec: CMD-NEXT-34, CMD-NEXT-36: the warning, and next records nothing."""
    run, token = holder
    bind_line(crw, LINE | {"run_id": "other-run"})
    lines = _owner_file(crw).read_bytes()
    taken = run.process_lock(token).stat().st_mtime_ns
    clock = FakeClock()
    before = run.journal.read_bytes()
    answer = _next(crw, clock, capsys)
    assert clock.base + clock.elapsed * 1e9 - taken >= 15e9  # the window, not less
    assert clock.elapsed <= 15.0 + next_module.POLL
    assert answer["state"] == "running"
    assert answer["spawn_formats"][0]["model"] == "m-arch"
    assert answer["warnings"] == [
        f"owner thread owner-thread is bound to run other-run, not to run {RUN}: the spawn "
        f"hook gives the owner's spawns run other-run's pairs, run {RUN}'s too, until a "
        f"process of run {RUN} binds the thread (a thread holds the line of one live run: "
        f"run {RUN}'s next process binds it once run other-run no longer lives); run {RUN} "
        "binds only the subagents spawned with its own step messages, which name its packets"
    ]
    assert run.journal.read_bytes() == before
    assert _owner_file(crw).read_bytes() == lines


def test_an_owner_no_start_or_process_ever_bound_is_reported_at_once(
    crw: Crw, holder: tuple[RunDir, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """spec: CMD-NEXT-36, BIND-LINE-14 (and the reading of CMD-NEXT-33 in
    next_state): no flow-bound file at all, so no window; next reports the missing
    line and writes none (the resume's process binds it: tests/actors/test_owner_line.py)."""
    clock = FakeClock()
    (warning,) = _next(crw, clock, capsys)["warnings"]
    assert clock.elapsed == 0
    assert f"last line is not run {RUN}'s (it has none)" in warning
    assert not _owner_file(crw).exists()


def test_a_line_under_another_digest_is_warned_about_and_left_as_it_is(
    crw: Crw, holder: tuple[RunDir, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """spec: CMD-NEXT-36"""
    bind_line(crw, LINE | {"policyDigest": "sha256:" + "b" * 64})
    lines = _owner_file(crw).read_bytes()
    clock = FakeClock()
    clock.elapsed = 15.0  # the holder took its lock 15 s ago
    (warning,) = _next(crw, clock, capsys)["warnings"]
    assert f"(it binds the run under policy digest sha256:{'b' * 64}, not {DIGEST}" in warning
    assert _owner_file(crw).read_bytes() == lines


def test_a_starting_run_is_read_again_15_s_whatever_wait_says(
    crw: Crw, capsys: pytest.CaptureFixture[str]
) -> None:
    """spec: CMD-NEXT-28, CMD-NEXT-29, CMD-NEXT-31, CMD-NEXT-32: its newest started row
    names a process lock nobody holds (the holder is coming up): never those pins."""
    run = _make_run(crw)
    _append_rows(run, {"row": "started", "backend": "session", "process": "gone"})
    with hold_run(run):
        for wait, waited in ((0, 15.0), (5, 15.0), (40, 40.0)):
            clock = FakeClock()
            answer = _next(crw, clock, capsys, wait=wait)
            assert waited <= clock.elapsed < waited + 2 * next_module.POLL
            assert (answer["state"], answer["spawn_formats"]) == ("starting", [])
            assert clock.reads >= waited / next_module.POLL - 1  # read again all along
        assert f"ask again with crw flow next {RUN} --wait 40 --state" in answer["hint"]
        assert "it answers when the state changes or --wait runs out" in answer["hint"]


def test_a_holder_coming_up_before_it_holds_the_run_lock_is_not_resumed(
    crw: Crw, capsys: pytest.CaptureFixture[str]
) -> None:
    """spec: CMD-NEXT-25, CMD-NEXT-30: a process holds its process lock from before
    it takes the run lock; next meanwhile reads the run starting, launches nothing,
    and answers once the holder recorded its started row."""
    run = _make_run(crw)
    process = take_process_lock(run)
    assert process is not None
    clock = FakeClock()
    holding: list[Any] = []

    def come_up() -> None:
        holding.append(run_lock(run))
        holding[0].__enter__()
        _append_rows(run, {"row": "started", "backend": "session", "process": process.token})
        bind_line(crw, LINE)

    clock.at(1.0, come_up)
    try:
        answer = _next(crw, clock, capsys)
    finally:
        if holding:
            holding[0].__exit__(None, None, None)
        process.release()
    assert "resumed_pid" not in answer and answer["state"] == "running"
    assert 1.0 <= clock.elapsed < 1.0 + 2 * next_module.POLL


def test_a_store_read_other_than_the_pins_is_warned_about(
    crw: Crw, holder: tuple[RunDir, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """spec: CMD-NEXT-37: the spawn formats stay the pins the process runs on."""
    run, _ = holder
    bind_line(crw, LINE)
    store = crw.state / "roles.toml"
    assert _next(crw, FakeClock(), capsys)["warnings"] == []
    store.write_text(PINS_TOML.replace('effort = "high"', 'effort = "low"'))
    before = run.journal.read_bytes()
    answer = _next(crw, FakeClock(), capsys)
    assert answer["warnings"] == [
        f"the role store reads other pairs than run {RUN} pinned (executor): its process "
        "runs on its pins; a resume takes the store's and records policy_repinned"
    ]
    assert answer["spawn_formats"][1]["reasoning_effort"] == "high"
    assert run.journal.read_bytes() == before
    next_module.next_command(RUN, wait=0, state=str(crw.state), json=False)
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1] == f"warning: {answer['warnings'][0]}"


def test_the_process_next_resumed_under_a_changed_store_repinned_and_next_says_so(
    crw: Crw, capsys: pytest.CaptureFixture[str]
) -> None:
    """spec: CMD-NEXT-38, CMD-NEXT-39: the line the earlier process bound (a start
    binds one before any process exists) is the resumed process's to bind again
    under its new digest; next reads again until it has (it read "none" when this
    test's run had no line at all and next asked before the process bound it)."""
    run = _make_run(crw)
    _append_rows(run, {"row": "started", "backend": "session", "pid": 1, "role_pairs": PINS})
    bind_line(crw, LINE)
    (crw.state / "roles.toml").write_text(PINS_TOML.replace("m-exec", "m-exec-2"))
    result = crw("flow", "next", RUN, "--state", str(crw.state), "--json")
    assert result.code == 0, result.stderr
    answer = result.json()
    crw.pids.append(answer["resumed_pid"])
    wait_for_exit(run.root)  # it finds no host and pauses
    kinds = [row["row"] for row in read_journal(run.journal).rows]
    assert kinds[-3:] == ["started", "policy_repinned", "paused"]
    assert answer["warnings"] == [
        f"the process next resumed repinned run {RUN} (policy_repinned): it runs on the "
        "role store as it reads now, not on the pairs the earlier process pinned"
    ]


def test_a_run_whose_start_holds_its_start_lock_is_starting_and_nothing_is_resumed(
    crw: Crw, capsys: pytest.CaptureFixture[str]
) -> None:
    """spec: CMD-NEXT-26, CMD-NEXT-30, CMD-NEXT-31: no process holds the run, but
    its start holds the start lock until its process holds the run."""
    run = _make_run(crw)
    before = run.journal.read_bytes()
    clock = FakeClock()
    with start_lock(run):
        answer = _next(crw, clock, capsys)
    assert (answer["state"], answer["steps"], answer["spawn_formats"]) == ("starting", [], [])
    assert "resumed_pid" not in answer
    assert clock.elapsed >= 15.0
    assert run.journal.read_bytes() == before
    assert run.log.read_bytes() == b""  # no process was launched
