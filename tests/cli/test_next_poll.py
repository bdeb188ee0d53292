"""`crw flow next --wait`'s pace: an owner asks again as soon as it took its
steps, and the run publishes the next ones a few ms later (a reply's bind, the
call's end, the gate), so a wait reads often at first and less after."""

from __future__ import annotations

import errno
import json
import threading
import time
from typing import Any

import pytest

from crw.bus import dirwatch, stepwake
from crw.cli.owner import next as next_module
from crw.engine.run.rundir import RunDir
from tests.cli.conftest import Crw
from tests.cli.test_next import RUN, _step, held
from tests.cli.test_next_window import FakeClock

__all__ = ["held"]


class Sleeps(FakeClock):
    def __init__(self) -> None:
        super().__init__()
        self.slept: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.slept.append(round(seconds, 6))
        super().sleep(seconds)


def _wait(crw: Crw, clock: FakeClock, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    code = next_module.next_command(
        RUN, wait=5.0, state=str(crw.state), json=True, clock=clock.clock()
    )
    assert code == 0
    answer: dict[str, Any] = json.loads(capsys.readouterr().out)
    return answer


def test_a_step_published_early_in_a_wait_is_answered_within_10_ms(
    crw: Crw, held: RunDir, capsys: pytest.CaptureFixture[str]
) -> None:
    """spec: CMD-NEXT-11. A step that comes 25 ms into the wait is answered at the
    read 30 ms in, not at the 50 ms poll."""
    clock = Sleeps()
    clock.at(0.025, lambda: _step(held, "build.1"))
    answer = _wait(crw, clock, capsys)
    assert [step["call"] for step in answer["steps"]] == ["build.1"]
    assert clock.slept == [0.01, 0.01, 0.01]


def test_a_long_wait_reads_every_50_ms_after_its_first_ten_reads(
    crw: Crw, held: RunDir, capsys: pytest.CaptureFixture[str]
) -> None:
    """spec: CMD-NEXT-11. Past its first ten reads a wait reads every 50 ms, as
    before: a waiting owner costs a read a poll."""
    clock = Sleeps()
    clock.at(1.0, lambda: _step(held, "build.1"))
    answer = _wait(crw, clock, capsys)
    assert [step["call"] for step in answer["steps"]] == ["build.1"]
    assert clock.slept[:10] == [0.01] * 10 and set(clock.slept[10:]) == {0.05}
    assert 1.0 <= clock.elapsed < 1.05


def test_the_json_answer_makes_no_human_form(
    crw: Crw, held: RunDir, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: CMD-NEXT-11. `--json` prints the object alone: the human lines (every
    step's host call as JSON again) are not made for it."""

    def no_human(view: Any) -> str:
        raise AssertionError("the human form was made for --json")

    monkeypatch.setattr(next_module, "human", no_human)
    _step(held, "build.1")
    code = next_module.next_command(RUN, wait=0.0, state=str(crw.state), json=True)
    assert code == 0
    assert [step["call"] for step in json.loads(capsys.readouterr().out)["steps"]] == ["build.1"]


def test_a_step_written_during_a_wait_ends_it_before_the_next_read(
    crw: Crw, held: RunDir, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: CMD-NEXT-11. Under the system clock the wait sleeps on a wake of the
    run's step files (`crw.bus.stepwake`), not for the poll: with reads 30 s
    apart, a step written 0.2 s into the wait is answered at once."""
    monkeypatch.setattr(next_module, "FIRST_POLL", 30.0)
    monkeypatch.setattr(next_module, "POLL", 30.0)
    writer = threading.Timer(0.2, _step, (held, "build.1"))
    writer.start()
    began = time.monotonic()
    try:
        code = next_module.next_command(RUN, wait=60.0, state=str(crw.state), json=True)
    finally:
        writer.join()
    assert code == 0
    assert time.monotonic() - began < 15.0  # not the 30 s read
    answer = json.loads(capsys.readouterr().out)
    assert [step["call"] for step in answer["steps"]] == ["build.1"]


def test_a_wait_with_no_inotify_left_still_finds_the_step_at_a_read(
    crw: Crw, held: RunDir, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: CMD-NEXT-11. No inotify instance can be made (the user's limit is
    reached: EMFILE): the wait sets no wake and reads at its pace, and the step
    written during it is answered at the next read."""
    module = dirwatch.inotify_simple()
    assert module is not None

    def no_instance_left(*args: Any, **kwargs: Any) -> Any:
        raise OSError(errno.EMFILE, "Too many open files")

    monkeypatch.setattr(module, "INotify", no_instance_left)
    monkeypatch.setattr(stepwake, "_spare", [])
    assert stepwake.StepWake.open(held) is None
    writer = threading.Timer(0.05, _step, (held, "build.1"))
    writer.start()
    try:
        code = next_module.next_command(RUN, wait=60.0, state=str(crw.state), json=True)
    finally:
        writer.join()
    assert code == 0
    answer = json.loads(capsys.readouterr().out)
    assert [step["call"] for step in answer["steps"]] == ["build.1"]
