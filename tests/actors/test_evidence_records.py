"""Flow evidence records on the session backend, end to end on the simulated host
with a scripted owner under one MockClock (docs/workspaces.md, Evidence records).

The reviewed workflow's executor node is a gated executor role and the run has an
evidence cwd; the simulated owner's subagents run in the owner's cwd (the sim
host's home), which is the run's evidence cwd here too. Each test asserts the
rows written, their order against the record's write, and the copies on disk.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import trio
from trio.testing import MockClock

import tests.actors.test_session_run as session_run
from crw.actors.journal_writer import open_journal_writer
from crw.bus import steps as bus
from crw.engine.owner.next_view import NextRead, held_calls
from crw.journal.log import read_journal
from crw.journal.rows import RowModel
from crw.workspace import evidence
from crw.workspace.placer import Placer
from crw.workspace.release import release
from tests.actors.test_held_in_place import answer
from tests.actors.test_review_rounds import REVIEWED, one
from tests.actors.test_session_resume import remembering, run_until_killed
from tests.actors.test_session_run import RUN_ID, Harness, Owner, harness, kinds
from tests.actors.test_supersede import restart
from tests.workspace.gitrepo import make_repo
from tests.workspace.test_placer_run import go as placed_go

Rows = list[dict[str, Any]]
CALL = "build.1"
BODY = ["prepared", "step_published", "thread_started", "turn_started", "completed"]
PLACED = [
    "prepared",
    "step_published",
    "evidence_placed",
    "thread_started",
    "turn_started",
    "completed",
]


def gated(tmp_path: Path, where: str = "home") -> Path:
    """The reviewed workflow with `evidence_cwd = "<where>"` (default the owner's
    cwd, where the subagents' stop hook runs: the sim host's home)."""
    option = f'pool = 2\nevidence_cwd = "{where}"\n'
    text = REVIEWED.replace("ROUNDS", "1").replace("pool = 2\n", option)
    (tmp_path / "wf.toml").write_text(text)
    return tmp_path / where


def copy_of(home: Path, call: str = CALL) -> Path:
    return evidence.record_path(str(home), RUN_ID, call)


def expected_record(rows: Rows, call: str = CALL, attempt: int = 1) -> dict[str, Any]:
    step = [r for r in rows if r.get("call") == call and r["row"] == "step_published"][-1]
    return {
        "run": RUN_ID,
        "call": call,
        "node": "build",
        "role": "executor",
        "op": f"{call}/t1",
        "marker": f"{call}/t1-a{attempt}",
        "attempt": attempt,
        "k": 1,
        "workspace": step["workspace"],
        "gate": {"role": "reviewer", "rounds": 1, "fix_effort": None},
    }


@dataclass
class Copies:
    """Each call's copy under `home` as it was when the call's completed row was
    durable (None: there was none); the run's end removes them."""

    home: Path
    at_completed: dict[str, Any] = field(default_factory=dict)
    present: dict[str, list[str]] = field(default_factory=dict)
    """The copies of the run under `home` when each completed row was durable."""

    def after_commit(self, rows: Sequence[RowModel]) -> None:
        for row in rows:
            if getattr(row, "row", None) == "completed" and row.call is not None:
                path = copy_of(self.home, row.call)
                self.present[row.call] = sorted(p.name for p in path.parent.glob("*.json"))
                self.at_completed[row.call] = (
                    json.loads(path.read_text()) if path.exists() else None
                )

    def install(self, monkeypatch: pytest.MonkeyPatch) -> Copies:
        writer = functools.partial(open_journal_writer, after_commit=self.after_commit)
        monkeypatch.setattr(session_run, "open_journal_writer", writer)
        return self


def journal_kinds(h: Harness, call: str = CALL) -> list[str]:
    return kinds(read_journal(h.run.journal).rows, call)


async def test_a_gated_executors_bind_places_its_record_before_thread_started(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: STEP-19, STEP-20, ROWS-8, BIND-10, BIND-11, BIND-4: the spawn step
    records its record, the directories it was written under before the row
    (none: a first step) and evidence_ignored; the bind under the owner's cwd,
    which no row names, commits evidence_placed, writes the record there (the
    journal then ends with evidence_placed), then thread_started names the cwd.
    A review and an explorer call have no record. The run's end (`release`, which
    the run's process calls after its ended row) removes the copy and the
    directories it made."""
    seen: list[tuple[list[str], bool]] = []
    write = evidence.write_record

    def watched(path: Path, record: Mapping[str, Any]) -> None:
        seen.append((journal_kinds(h), path.exists()))
        write(path, record)

    monkeypatch.setattr(evidence, "write_record", watched)
    async with harness(tmp_path) as h:
        home = gated(tmp_path)
        copies = Copies(home).install(monkeypatch)
        state, rows = await h.go()
    assert state == "ended" and rows[-1]["status"] == "completed"
    assert kinds(rows, CALL) == PLACED
    record = expected_record(rows)
    step = one(rows, CALL, "step_published")
    assert step["evidence_assignment"] == record
    assert (step["evidence_cwds"], step["evidence_ignored"]) == ([], [])
    placed = one(rows, CALL, "evidence_placed")
    assert (placed["evidence_cwd"], placed["attempt"], placed["marker"]) == (
        str(home),
        1,
        f"{CALL}/t1-a1",
    )
    assert placed["evidence_assignment"] == record
    started = one(rows, CALL, "thread_started")
    assert started["evidence_cwd"] == started["host_cwd"] == str(home)
    # The one write: after evidence_placed was durable, before thread_started.
    assert seen == [(PLACED[:3], False)]
    assert copies.at_completed[CALL] == record
    assert copy_of(home).exists()  # the run's process releases it after the ended row
    release(RUN_ID, None, rows)
    assert not (home / ".crw").exists()
    for call in ("build.2", "ship.1"):
        assert kinds(rows, call) == BODY
        assert one(rows, call, "step_published").get("evidence_assignment") is None
        assert one(rows, call, "thread_started").get("evidence_cwd") is None


async def test_a_record_that_cannot_be_placed_holds_the_call_unbound(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: BIND-12, BIND-13: a file in the way of .crw/evidence under the
    subagent's cwd: evidence_placed, then no thread_started: the subagent is left
    unbound and the call held evidence_assignment_failed (the error names the
    file); next shows the fix. Moved out of the way and answered retry, the
    step's subagent is found by its marker and bound, its record written under
    the cwd the rows name with no second evidence_placed."""
    async with harness(tmp_path) as h:
        home = gated(tmp_path)
        home.mkdir(parents=True, exist_ok=True)
        (home / ".crw").write_text("in the way")
        copies = Copies(home).install(monkeypatch)
        state, held_rows = await h.go()
        spawned = list(h.owner.spawned)
        assert state == "waiting_decision"
        (home / ".crw").unlink()
        answer(h.run, "retry")
        state, rows = await h.go()
    assert kinds(held_rows, CALL) == ["prepared", "step_published", "evidence_placed", "held"]
    held = one(held_rows, CALL, "held")
    assert held["reason"] == "evidence_assignment_failed"
    assert str(home / ".crw") in held["error"]
    assert len(spawned) == 1
    (shown,) = held_calls(NextRead(run=RUN_ID, rows=held_rows))
    assert shown["reason"] == "evidence_assignment_failed" and "writable" in shown["fix"]
    assert state == "ended" and rows[-1]["status"] == "completed"
    after = kinds(rows[len(held_rows) :], CALL)
    assert after == ["decision", "thread_started", "turn_started", "completed"]
    started = one(rows, CALL, "thread_started")
    assert started["thread_id"] == spawned[0] and started["evidence_cwd"] == str(home)
    assert copies.at_completed[CALL] == expected_record(rows)


async def test_a_run_killed_after_evidence_placed_writes_the_record_on_resume(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: BIND-10, BIND-11: killed between evidence_placed and the record (none
    written): the resumed call writes the copy its rows name and binds with no
    second evidence_placed, to the outcome of the run that was not killed."""
    async with harness(tmp_path) as h:
        home = gated(tmp_path)
        remembering(h)
        dead = await run_until_killed(h, monkeypatch, "evidence_placed")
        missing = not copy_of(home).exists()
        copies = Copies(home).install(monkeypatch)
        state, rows = await h.go()
    assert kinds(dead, CALL)[-1] == "evidence_placed" and missing
    assert state == "ended" and rows[-1]["status"] == "completed"
    assert kinds(rows, CALL) == PLACED
    assert copies.at_completed[CALL] == expected_record(rows)
    assert one(rows, CALL, "thread_started")["evidence_cwd"] == str(home)


async def test_a_run_killed_after_the_record_before_thread_started_binds_on_resume(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: BIND-10, BIND-11: killed between the record and thread_started: the
    resumed call binds the subagent with no second evidence_placed, to the same
    outcome."""
    kill = trio.CancelScope()
    write = evidence.write_record

    def then_die(path: Path, record: Mapping[str, Any]) -> None:
        write(path, record)
        trio.from_thread.run_sync(kill.cancel)

    async with harness(tmp_path) as h:
        home = gated(tmp_path)
        remembering(h)
        with monkeypatch.context() as patch:
            patch.setattr(evidence, "write_record", then_die)
            with kill:
                await h.go()
        dead = read_journal(h.run.journal).rows
        written = copy_of(home).exists()
        copies = Copies(home).install(monkeypatch)
        state, rows = await h.go()
    assert kill.cancelled_caught and written
    assert kinds(dead, CALL) == PLACED[:3]
    assert state == "ended" and rows[-1]["status"] == "completed"
    assert kinds(rows, CALL) == PLACED
    assert copies.at_completed[CALL] == expected_record(rows)


async def test_a_resumed_call_restores_a_copy_its_rows_name(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: ROWS-10: a copy removed while the run was down (its call bound, its
    turn running) is written again from the rows when the call resumes."""
    async with harness(tmp_path) as h:
        home = gated(tmp_path)
        remembering(h)
        await h.script({"marker": f"{CALL}/t1-a1"}, seconds=60)
        await run_until_killed(h, monkeypatch, "turn_started")
        copy_of(home).unlink()
        copies = Copies(home).install(monkeypatch)
        state, rows = await h.go()
    assert state == "ended" and kinds(rows, CALL) == PLACED
    assert copies.at_completed[CALL] == expected_record(rows)


async def test_a_superseded_calls_copies_are_released(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: ROWS-9: build.1 bound (its record placed) and held; answered restart,
    it is superseded and every copy its rows name is removed; the new call
    build.2 places its own."""
    async with harness(tmp_path) as h:
        home = gated(tmp_path)
        await h.script({"marker": f"{CALL}/t1-a1"}, fail="internalServerError")
        state, held_rows = await h.go()
        assert state == "waiting_decision" and copy_of(home).exists()
        restart(h.run)
        copies = Copies(home).install(monkeypatch)
        state, rows = await h.go()
        steps_left = [s for s in bus.list_steps(h.run) if s.call == CALL]
    assert kinds(held_rows, CALL)[:3] == PLACED[:3]
    assert kinds(rows, CALL)[-1] == "superseded"
    assert steps_left == [] and kinds(rows, "build.2") == PLACED
    # build.1's copy was gone by the time build.2 completed; build.2's was there.
    assert copies.present["build.2"] == ["build.2.json"]
    assert copies.at_completed["build.2"] == expected_record(rows, "build.2")
    assert copies.present["build.2"] == sorted(p.name for p in copy_of(home).parent.iterdir())
    release(RUN_ID, None, rows)  # the run's end releases build.2's
    assert not (home / ".crw").exists()


@dataclass
class ElsewhereOwner(Owner):
    """The owner, whose spawn of attempt n starts its subagent in `cwds[n]`."""

    cwds: dict[int, str] = field(default_factory=dict)

    async def _take(self, step: bus.StepFile) -> str:
        if step.action != "spawn" or step.attempt not in self.cwds:
            return await super()._take(step)
        params = {
            "parentThreadId": self.thread_id,
            "agentType": step.agent_type,
            "message": step.message,
            "cwd": self.cwds[step.attempt],
        }
        agent = str((await self.client.request("sim/spawnAgent", params))["agentId"])
        self.spawned.append(agent)
        return agent


async def test_a_later_attempts_step_names_and_rewrites_the_copies_its_generation_placed(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: STEP-20, ROWS-8, BIND-10: attempt 1 bound under A (placed there) is
    lost; attempt 2's step names A in evidence_cwds and the step writer rewrites
    A's copy with attempt 2's record after the row; its subagent runs under B,
    which no row names: evidence_placed for B, then thread_started under B. At
    completion both copies hold attempt 2's record."""
    a, b = tmp_path / "a", tmp_path / "b"
    async with harness(tmp_path) as h:
        gated(tmp_path)
        h.owner = ElsewhereOwner(h.client, h.run, h.owner.thread_id, cwds={1: str(a), 2: str(b)})
        await h.script({"marker": f"{CALL}/t1-a1"}, vanish="notLoaded")
        seen: list[int | None] = []
        write = evidence.write_record

        def watched(path: Path, record: Mapping[str, Any]) -> None:
            if path == copy_of(a) and record["attempt"] == 2:  # A's copy rewritten
                seen.append(journal_kinds(h).count("evidence_placed"))
            write(path, record)

        monkeypatch.setattr(evidence, "write_record", watched)
        copies_a, copies_b = Copies(a), Copies(b)

        def after_commit(rows: Sequence[RowModel]) -> None:
            copies_a.after_commit(rows)
            copies_b.after_commit(rows)

        writer = functools.partial(open_journal_writer, after_commit=after_commit)
        monkeypatch.setattr(session_run, "open_journal_writer", writer)
        state, rows = await h.go()
    assert state == "ended" and rows[-1]["status"] == "completed"
    assert kinds(rows, CALL) == [
        "prepared",
        "step_published",
        "evidence_placed",
        "thread_started",
        "turn_started",
        "session_attempt_lost",
        "step_published",
        "evidence_placed",
        "thread_started",
        "turn_started",
        "completed",
    ]
    first, second = [r for r in rows if r.get("call") == CALL and r["row"] == "step_published"]
    assert first["evidence_cwds"] == [] and second["evidence_cwds"] == [str(a)]
    assert second["evidence_assignment"]["attempt"] == 2
    placed = [
        r["evidence_cwd"] for r in rows if r.get("call") == CALL and r["row"] == "evidence_placed"
    ]
    assert placed == [str(a), str(b)]
    started = [r for r in rows if r.get("call") == CALL and r["row"] == "thread_started"]
    assert [r["evidence_cwd"] for r in started] == [str(a), str(b)]
    assert seen == [1]  # rewritten after attempt 2's row, before B was placed
    record = expected_record(rows, attempt=2)
    assert copies_a.at_completed[CALL] == copies_b.at_completed[CALL] == record
    release(RUN_ID, None, rows)  # the run's end: both copies its rows name
    assert not (a / ".crw").exists() and not (b / ".crw").exists()


async def test_a_record_in_the_owners_git_checkout_is_in_no_status_and_names_the_worktree(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: BIND-4, BIND-11: the run's calls in a git repository (the placer):
    the owner runs in the repository's checkout, the gated executor in its attempt
    worktree P. The record is placed in the owner's checkout, names P, and is in
    no `git status` of the checkout; the run's end leaves the checkout as it was."""
    repo = make_repo(tmp_path / "repo", {"main.go": "package main\n"})
    root = str(repo.workdir).rstrip("/")
    seen: list[tuple[dict[str, Any], dict[str, int]]] = []
    write = evidence.write_record

    def watched(path: Path, record: Mapping[str, Any]) -> None:
        write(path, record)
        seen.append((json.loads(path.read_text()), repo.status()))

    monkeypatch.setattr(evidence, "write_record", watched)
    async with harness(tmp_path) as h:
        text = REVIEWED.replace("ROUNDS", "1").replace(
            "pool = 2\n", 'pool = 2\nevidence_cwd = "repo"\n'
        )
        (tmp_path / "wf.toml").write_text(text)
        owner = str((await h.client.request("sim/startOwner", {"cwd": root}))["threadId"])
        h.owner = Owner(h.client, h.run, owner)
        placer = Placer(RUN_ID, root, str(repo.head.target), h.run.calls)
        state, rows = await placed_go(h, placer)
    # The executor's completed row is followed by its crw.commit in a git repository.
    assert state == "ended" and kinds(rows, CALL) == [*PLACED, "crw_commit"]
    workspace = one(rows, CALL, "prepared")["allocation"]["workspace"]
    assert one(rows, CALL, "prepared")["allocation"]["kind"] == "worktree"
    started = one(rows, CALL, "thread_started")
    assert started["evidence_cwd"] == started["host_cwd"] == root and started["cwd"] == workspace
    assert seen == [(expected_record(rows), {})]
    assert expected_record(rows)["workspace"] == workspace
    release(RUN_ID, placer, rows)  # the run's end
    assert repo.status() == {} and not (Path(root) / ".crw").exists()
