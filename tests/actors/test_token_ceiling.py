"""The run's token figure and its ceiling on the session backend, asserted on the
rows: a workflow's `token_ceiling` pauses the run before the next admission, it
counts only the turns the run measured, and a resumed process counts the call
tokens it takes from step_published once (the harnesses of `test_session_run`
and `test_session_resume`)."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pytest
from trio.testing import MockClock

import tests.actors.test_session_run as session_run
from crw.actors.journal_writer import open_journal_writer
from crw.engine.answers import outcome
from crw.journal.log import read_journal
from crw.journal.replay import replay
from tests.actors.test_session_resume import KillPoint, remembering
from tests.actors.test_session_run import Harness, harness, kinds

# explore and build run side by side; review needs build.
SIDE_BY_SIDE = """
name = "ceiling"
pool = 2
token_ceiling = {ceiling}

[[node]]
id = "explore"
role = "explorer"
task = "Find the files."
schema = {{ type = "object", required = ["files"] }}

[[node]]
id = "build"
role = "executor"
task = "Fix it."
schema = {{ type = "object", required = ["summary"] }}

[[node]]
id = "review"
role = "reviewer"
needs = ["build"]
task = "Review: {{build.summary}}"
schema = {{ type = "object", required = ["verdict"] }}
"""
TURN = {"input": 1000, "output": 100}  # total 1100
SMALL = {"input": 100, "output": 10}  # total 110


def workflow(h: Harness, ceiling: int) -> None:
    (h.run.root.parent / "wf.toml").write_text(SIDE_BY_SIDE.format(ceiling=ceiling))


def paused_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in rows if r["row"] == "paused"]


async def test_ceiling_pauses_the_run_before_the_next_admission(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: HARV-27: the calls in flight finish, nothing more is admitted, and the
    paused row records the figure and the ceiling."""
    async with harness(tmp_path) as h:
        workflow(h, ceiling=1000)
        await h.script({"marker": "explore.1/*"}, tokens=TURN, seconds=100)
        await h.script({"marker": "build.1/*"}, tokens=TURN)
        state, rows = await h.go()
    (paused,) = paused_rows(rows)
    assert paused["reason"] == "token_ceiling" and paused["token_ceiling"] == 1000
    assert paused["tokens"]["total"] == 1100 and "1100" in paused["error"]
    before, after = rows[: rows.index(paused)], rows[rows.index(paused) :]
    # In flight (admitted before the pause): it finished. Whether its bind came
    # before the pause row or after is the owner's pace, not the rule.
    assert "prepared" in kinds(before, "explore.1")
    assert "prepared" not in kinds(after, "explore.1")
    assert kinds(after, "explore.1")[-1:] == ["completed"]
    assert kinds(rows, "review.1") == []
    assert state == "paused" and replay(rows).paused_reason == "token_ceiling"


@pytest.mark.parametrize("measured", [True, False])
async def test_ceiling_counts_only_the_turns_the_run_measured(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch, measured: bool
) -> None:
    """spec: HARV-27, HARV-26: a turn whose rollout cannot be read counts nothing
    against the ceiling (tokens_unmeasured), so the run goes on."""
    if not measured:
        monkeypatch.setattr(outcome, "read_rollout_total", lambda path: None)
    async with harness(tmp_path) as h:
        workflow(h, ceiling=1000)
        await h.script({"marker": "*"}, tokens=TURN)
        state, rows = await h.go()
    if measured:
        assert [p["reason"] for p in paused_rows(rows)] == ["token_ceiling"]
        assert kinds(rows, "review.1") == [] and state == "paused"
    else:
        assert len([r for r in rows if r["row"] == "tokens_unmeasured"]) == 3
        assert paused_rows(rows) == []
        assert state == "ended" and rows[-1]["status"] == "completed"


async def run_until_repair_published(h: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first process: explore's turn 1 answers wrong and counts 1100; the run
    dies right after explore's repair step (send_input, call_tokens 1100) is
    durable, while build's turn still runs."""
    kill = KillPoint("step_published", "explore.1", nth=2)
    writer = functools.partial(open_journal_writer, after_commit=kill.after_commit)
    with monkeypatch.context() as patch:
        patch.setattr(session_run, "open_journal_writer", writer)
        with kill.scope:
            await h.go()
    assert kill.scope.cancelled_caught


async def resumed_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ceiling: int, repair_seconds: float
) -> tuple[str, list[dict[str, Any]]]:
    """explore's repair turn takes `repair_seconds` in the resumed process; build's
    turn, begun in the dead one, ends at 60 s and counts 110."""
    async with harness(tmp_path) as h:
        workflow(h, ceiling)
        remembering(h)
        # explore's first turn takes 30 s, so build (bound at once, its turn 60 s)
        # is surely running when the first process dies after explore's repair step.
        await h.script({"marker": "explore.1/*"}, invalidFirst=True, tokens=TURN, seconds=30)
        await h.script({"marker": "explore.1/t2-*"}, tokens=TURN, seconds=repair_seconds)
        await h.script({"marker": "build.1/*"}, tokens=SMALL, seconds=60)
        await run_until_repair_published(h, monkeypatch)
        dead = read_journal(h.run.journal).rows
        repair = [r for r in dead if r["row"] == "step_published" and r["call"] == "explore.1"][1]
        assert repair["action"] == "send_input" and repair["call_tokens"]["total"] == 1100
        assert kinds(dead, "build.1")[-1] == "turn_started"
        return await h.go()


def completed(rows: list[dict[str, Any]], call: str) -> dict[str, Any]:
    return next(r for r in rows if r["row"] == "completed" and r["call"] == call)


@pytest.mark.parametrize(("ceiling", "pauses"), [(1210, True), (1211, False)])
async def test_resumed_process_counts_the_call_tokens_it_takes_when_it_takes_them(
    tmp_path: Path,
    autojump_clock: MockClock,
    monkeypatch: pytest.MonkeyPatch,
    ceiling: int,
    pauses: bool,
) -> None:
    """spec: HARV-22, HARV-21, HARV-23: the resumed process counts explore's 1100
    taken from step_published at once, while its repair turn still runs: build
    ending at 60 s brings the figure to 1210, which meets a ceiling of 1210
    (review is not admitted) and not one of 1211."""
    state, rows = await resumed_run(tmp_path, monkeypatch, ceiling, repair_seconds=300)
    done = completed(rows, "explore.1")
    assert done["tokens"]["total"] == 2200  # the terminal row carries what it took
    if pauses:
        (paused,) = paused_rows(rows)
        assert paused["tokens"]["total"] == 1210
        assert rows.index(paused) < rows.index(done)  # counted before its repair ended
        assert kinds(rows, "review.1") == [] and state == "paused"
    else:
        assert paused_rows(rows) == []
        assert state == "ended" and rows[-1]["status"] == "completed"


@pytest.mark.parametrize(("ceiling", "pauses"), [(2200, True), (3300, False)])
async def test_resumed_process_counts_the_call_tokens_it_takes_once(
    tmp_path: Path,
    autojump_clock: MockClock,
    monkeypatch: pytest.MonkeyPatch,
    ceiling: int,
    pauses: bool,
) -> None:
    """spec: HARV-24, HARV-23: explore (build needs it) resumes with the 1100 it
    takes from step_published; its terminal row carries 2200, and the figure the
    gate judges build's admission by is 2200: the tokens taken counted once, as
    the rows' RunSpent counts them: it meets a ceiling of 2200, and not one of
    3300 (which the 1100 counted twice would meet; build adds 110 after)."""
    async with harness(tmp_path) as h:
        chain = (h.run.root.parent / "wf.toml").read_text()
        chain = chain.replace("pool = 2\n", f"pool = 2\ntoken_ceiling = {ceiling}\n")
        (h.run.root.parent / "wf.toml").write_text(chain)
        remembering(h)
        await h.script({"marker": "explore.1/*"}, invalidFirst=True, tokens=TURN)
        await h.script({"marker": "build.1/*"}, tokens=SMALL)
        await run_until_repair_published(h, monkeypatch)
        state, rows = await h.go()
    assert completed(rows, "explore.1")["tokens"]["total"] == 2200
    if pauses:
        (paused,) = paused_rows(rows)
        assert paused["tokens"]["total"] == 2200 == replay(rows).spent["total"]
        assert kinds(rows, "build.1") == [] and state == "paused"
    else:
        assert paused_rows(rows) == []
        assert state == "ended" and rows[-1]["status"] == "completed"
