"""After a restart the run finds the subagent of a published spawn step by the
spawn hook's ledger joined with the owner's turns, and writes what the join
could not tie as session_host_warning rows.

The harness of `test_session_run` on the simulated host under one MockClock: the
owner spawns build.1's step without reporting it and the run dies before it sees
it; the host's subagent listing shows nothing (so the marker lookup finds
nothing), and the resumed run has only the ledger and the owner's turns.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio
from trio.testing import MockClock

from crw.actors.host_reader import HostReader
from crw.binding.ledger import append_decision
from crw.host.protocol import Thread
from crw.journal.log import read_journal
from tests.actors.test_session_resume import CALL, remembering, run_until_owner_took
from tests.actors.test_session_run import RUN_ID, Harness, harness, kinds

OP = f"{CALL}/t1"
Rows = list[dict[str, Any]]
COMPLETED_WITHIN = 6 * 3600.0
"""Mock seconds the resumed run has to complete CALL before the test fails."""


def no_listing(monkeypatch: pytest.MonkeyPatch) -> None:
    """The host lists none of the owner's subagents: the marker lookup finds nothing."""

    async def nothing(self: HostReader, owner: str, marker: str, bound: Any = None) -> list[Thread]:
        return []

    monkeypatch.setattr(HostReader, "spawned", nothing)


def spawn_item(h: Harness) -> tuple[str, str, str]:
    """The owner's turn, its spawnAgent item of build.1's step and the subagent it names."""
    owner = h.sim.state.threads[h.owner.thread_id]
    for turn in owner.turns:
        for item in turn.items:
            prompt = item.get("prompt") or ""
            if item["type"] == "collabAgentToolCall" and prompt.startswith(f"crw-flow-op: {OP}-a1"):
                return turn.id, item["id"], item["receiverThreadIds"][0]
    raise AssertionError("the owner spawned nothing")


def hook_line(turn_id: str, tool_use_id: str, op: str = OP) -> dict[str, Any]:
    """A ledger line as the spawn hook writes it for the owner's spawn."""
    return {
        "run_id": RUN_ID,
        "turn_id": turn_id,
        "tool_use_id": tool_use_id,
        "agent_id": None,
        "decision": "allow",
        "refusal": None,
        "role": "executor",
        "op": op,
        "warnings": [],
    }


def forget_prompt(h: Harness, item_id: str) -> None:
    """The owner's spawn item `item_id` as a host that shows no prompt sends it."""
    for turn in h.sim.state.threads[h.owner.thread_id].turns:
        for item in turn.items:
            if item["id"] == item_id:
                item["prompt"] = None


async def resumed(
    h: Harness,
    lines: list[dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
    *,
    listed: bool = False,
    prompt: bool = True,
) -> tuple[Rows, Rows, str]:
    """Kill the run once the owner spawned build.1's step (unreported), write the
    ledger `lines` (given the owner's turn, item and subagent), resume: the rows
    before, the rows after (the resumed run until CALL completed), the subagent.
    The host lists the owner's subagents when `listed` (the marker lookup may find
    it), and shows the spawn item's prompt when `prompt`."""
    owner = remembering(h, report=False)
    dead = await run_until_owner_took(h, owner, 1)
    owner.spawned.clear()
    if not listed:
        no_listing(monkeypatch)
    turn_id, item_id, agent = spawn_item(h)
    if not prompt:
        forget_prompt(h, item_id)
    state = h.run.root.parent.parent  # the harness's run is <state>/flow/<run>'s place
    (state / "flow-bound").mkdir(mode=0o700, exist_ok=True)
    for line in lines:
        filled = {
            k: v.format(turn=turn_id, item=item_id) if isinstance(v, str) else v
            for k, v in line.items()
        }
        assert append_decision(state, h.owner.thread_id, filled) is None
    async with trio.open_nursery() as nursery:
        nursery.start_soon(h.go)
        await call_completed(h)
        nursery.cancel_scope.cancel()
    return dead, read_journal(h.run.journal).rows[len(dead) :], agent


async def call_completed(h: Harness) -> None:
    """Return once the journal holds CALL's completed row (polling, as a reader
    does). The run's file I/O runs in worker threads, during which the autojump
    clock moves on: a budget of mock time is no measure of the run's progress, so
    the test waits for the row, bounded so that a run that never gets there fails."""
    with trio.fail_after(COMPLETED_WITHIN):
        while "completed" not in kinds(read_journal(h.run.journal).rows, CALL):  # noqa: ASYNC110
            await trio.sleep(1.0)


async def test_resumed_run_binds_the_subagent_the_ledger_and_the_owners_turn_name(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: HOOK-17: the step is bound to the owner's spawn (no second spawn, no
    step published again), with no warning."""
    async with harness(tmp_path) as h:
        dead, after, agent = await resumed(h, [hook_line("{turn}", "{item}")], monkeypatch)
        spawned_again = list(h.owner.spawned)
    assert kinds(dead, CALL) == ["prepared", "step_published"]
    assert kinds(after, CALL)[:2] == ["thread_started", "turn_started"]
    assert kinds(after, CALL)[-1] == "completed"
    started = next(r for r in after if r["row"] == "thread_started")
    assert (started["thread_id"], started["marker"]) == (agent, f"{OP}-a1")
    assert spawned_again == [s for s in spawned_again if s != agent]
    assert "session_host_warning" not in {r["row"] for r in after}


async def test_resumed_run_binds_through_the_ledger_a_spawn_the_owners_item_shows_no_prompt(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: HOOK-17: the owner's spawn item carries no prompt and the host lists no
    subagent: only the ledger line (its op, its tool_use_id the item's id) ties the
    item's subagent to the step, and the run binds it and completes."""
    async with harness(tmp_path) as h:
        line = hook_line("{turn}", "{item}")
        _, after, agent = await resumed(h, [line], monkeypatch, prompt=False)
    started = next(r for r in after if r["row"] == "thread_started")
    assert (started["call"], started["thread_id"]) == (CALL, agent)
    assert kinds(after, CALL)[-1] == "completed"
    assert "session_host_warning" not in {r["row"] for r in after}


@pytest.mark.parametrize(
    ("lines", "warnings", "listed"),
    [
        ([hook_line("{turn}", "explore-item", op="explore.1/t1")], ["no_ledger_line"], True),
        (
            [hook_line("{turn}", "{item}"), hook_line("turn-gone", "call-gone")],
            ["window_ended"],
            False,
        ),
        ([hook_line("{turn}", "{item}", op=f"{CALL}/t9")], ["ledger_op_differs"], False),
    ],
    ids=["no-ledger-line", "window-ended", "ledger-op-differs"],
)
async def test_what_the_join_cannot_tie_is_a_session_host_warning_row(
    tmp_path: Path,
    autojump_clock: MockClock,
    monkeypatch: pytest.MonkeyPatch,
    lines: list[dict[str, Any]],
    warnings: list[str],
    listed: bool,
) -> None:
    """spec: WAKE-15, ROWS-14: the warning row (op, warnings) is written before the
    bind, once; the subagent the owner's turn names is bound all the same (with no
    ledger line of its own, by the marker lookup: the host lists it)."""
    async with harness(tmp_path) as h:
        _, after, agent = await resumed(h, lines, monkeypatch, listed=listed)
    mine = [r for r in after if r.get("call") == CALL]
    assert [r["row"] for r in mine][:3] == [
        "session_host_warning",
        "thread_started",
        "turn_started",
    ]
    assert {k: mine[0][k] for k in ("row", "call", "op", "warnings")} == {
        "row": "session_host_warning",
        "call": CALL,
        "op": OP,
        "warnings": warnings,
    }
    assert [r["row"] for r in after].count("session_host_warning") == 1
    assert mine[1]["thread_id"] == agent
