"""Review rounds on the App Server backend, end to end on the simulated host.

The same round as the session backend's (tests/actors/test_review_rounds.py):
`build.1` the node, `build.2` its review, `build.3` the fix that continues
`build.1`, `build.4` the fix's review. The fix's thread is a `thread/fork` of the
handle's thread carrying the leaf keys; inside a resume's suffix it is a thread
started anew after checkpoint_started. Each test asserts the rows written.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import trio
from trio.testing import MockClock

from crw.actors.app_server_context import CallContext
from crw.actors.app_server_run import run_app_server_calls
from crw.actors.control import RunControl
from crw.actors.journal_writer import open_journal_writer
from crw.bus import control as requests
from crw.clock import fixed_clock
from crw.engine.answers import answer
from crw.engine.config.roles import RolePair, RoleTable
from crw.engine.config.workflow import load_workflow
from crw.engine.run.rundir import RunDir
from crw.host.sim.server import SimHost, open_sim_host
from crw.host.sim.state import SimState
from crw.journal.log import read_journal
from crw.journal.replay import RunState
from crw.journal.rows import Started
from tests.actors.test_app_server_resume import KEY, TMPDIR, Host, kill_after
from tests.actors.test_app_server_run import Harness, harness, kinds, replayed
from tests.drills import scenes
from tests.drills.scenes import FIXED, REJECT

REVIEWED = scenes.REVIEWED.replace("pool = 2", "pool = 1")
"""The session drills' reviewed workflow, one call at a time."""
ACCEPT = {"verdict": "accept", "findings": []}
BODY = ["prepared", "step_published", "thread_started", "turn_started", "completed"]
Rows = list[dict[str, Any]]


async def reviewed(sim: SimHost, tmp_path: Path, name: str = "run", rounds: int = 1) -> Host:
    """A run on `sim` of the reviewed workflow: build.2 rejects, build.3 answers
    FIXED, build.4 accepts."""
    (tmp_path / "wf.toml").write_text(REVIEWED.replace("rounds = 1", f"rounds = {rounds}"))
    made = Host(sim, load_workflow(tmp_path / "wf.toml"), tmp_path / name)
    made.run_dir.mkdir()
    for marker, behaviour in (
        ("*", {"seconds": 5}),
        ("build.2/*", {"seconds": 5, "answer": REJECT}),
        ("build.1/*", {"seconds": 5, "tokens": {"input": 1000, "output": 50}}),
        ("build.3/*", {"seconds": 5, "answer": FIXED, "tokens": {"input": 300, "output": 30}}),
        ("build.4/*", {"seconds": 5, "answer": ACCEPT}),
    ):
        await made.request("sim/script", {"match": {"marker": marker}, "behaviour": behaviour})
    return made


def of(rows: Rows, call: str, kind: str) -> Rows:
    return [r for r in rows if r.get("call") == call and r["row"] == kind]


def one(rows: Rows, call: str, kind: str) -> dict[str, Any]:
    found = of(rows, call, kind)
    assert len(found) == 1, (call, kind, found)
    return found[0]


def host_text(made: Host, call: str) -> str:
    """The text of the call's first turn as the host received it."""
    thread = made.thread(call)
    turns = thread.wire(include_turns=True)["turns"]
    own = [t for t in turns if f"crw-flow-op: {call}/" in str(t["items"][0]["content"][0]["text"])]
    return str(own[0]["items"][0]["content"][0]["text"])


def turns_by_marker(made: Host) -> Counter[str]:
    """Every turn the host ran on the run's threads, counted by its marker line
    (a turn a fork took with its source's history is the source's, counted once)."""
    turns: dict[str, str] = {}
    for row in made.rows():
        if row["row"] == "thread_started":
            for turn in made.sim.state.threads[row["thread_id"]].wire(include_turns=True)["turns"]:
                text = str(turn["items"][0]["content"][0]["text"])
                turns[turn["id"]] = text.split("\n", 1)[0]
    return Counter(turns.values())


async def test_a_rejection_runs_a_fix_on_a_fork_of_the_node_thread(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: ATT-37, ATT-38, ROWS-4, STEP-25, STEP-54, STEP-56, STEP-57, STEP-58, ATT-40,
    ATT-41, ATT-45, ATT-49"""
    async with open_sim_host(tmp_path / "home") as sim:
        made = await reviewed(sim, tmp_path)
        assert await made.process() == "ended"
        rows = made.rows()
        fork = made.thread("build.3")
        handle = made.thread("build.1")
        text = host_text(made, "build.3")
    assert rows[-1]["row"] == "ended" and rows[-1]["status"] == "completed"
    calls = [r["call"] for r in rows if r["row"] == "prepared"]
    assert calls == ["build.1", "build.2", "build.3", "build.4", "ship.1"]
    for call in calls:
        assert kinds(rows, call) == BODY, call
    assert not [r for r in rows if r["row"] == "checkpoint_started"]
    # The review: the reviewer judges build.1's answer, in build.1's workspace.
    assert one(rows, "build.2", "prepared")["role"] == "reviewer"
    assert one(rows, "build.2", "prepared")["review"] == "build.1"  # the call it judges
    assert [one(rows, c, "prepared").get("review") for c in ("build.1", "build.3")] == [None] * 2
    assert one(rows, "build.2", "completed")["result"] == REJECT
    first = one(rows, "build.1", "prepared")
    assert first["allocation"]["workspace"] in one(rows, "build.2", "step_published")["input"]
    # The fix: a continuation of build.1 in its workspace, a spawn step at
    # conversation turn 1, on a thread of its own forked from build.1's.
    fix = one(rows, "build.3", "prepared")
    assert (fix["resume"], fix["role"], fix["backend"]) == ("build.1", "executor", "app-server")
    assert fix["allocation"]["workspace"] == first["allocation"]["workspace"]
    step = one(rows, "build.3", "step_published")
    assert (step["k"], step["attempt"], step["action"], step["conversation_turn"]) == (
        1,
        1,
        "spawn",
        1,
    )
    started = one(rows, "build.3", "thread_started")
    assert started["thread_id"] == fork.id != handle.id
    assert started["cwd"] == first["allocation"]["workspace"] and started["via"] == "app-server"
    assert fork.forked_from_id == handle.id
    assert fork.config == {KEY: TMPDIR}  # the fork carries the leaf keys itself
    assert one(rows, "build.3", "turn_started")["conversation_turn"] == 1
    # Its input: the journal's record of build.1's turns, the answer file, the
    # findings; journaled without the tools, which the host's text ends with.
    journaled = step["input"]
    assert "## The conversation you go on from" in journaled
    assert "### build.1 turn 1 (t1-a1)" in journaled
    assert one(rows, "build.1", "step_published")["input"] in journaled
    assert "The packet of the call you continue: the input of build.1 turn 1 above." in journaled
    assert "- the summary names no file" in journaled
    assert "## Repository tools" not in journaled
    assert text.startswith(journaled) and "## Repository tools" in text[len(journaled) :]
    answer_file = journaled.split("Its answer: ", 1)[1].split(".json", 1)[0] + ".json"
    assert (
        json.loads(await trio.Path(answer_file).read_text())
        == one(rows, "build.1", "completed")["result"]
    )
    task = journaled.split("## Task\n\n", 1)[1].rsplit("\n\n## Output contract", 1)[0]
    schema = load_workflow(tmp_path / "wf.toml").nodes[0].output_schema
    expected = {"task": task, "schema": schema, "resume": "build.1", "threads": [handle.id]}
    assert fix["input_digest"] == answer.digest(expected)
    # The accepted answer is the node's result: the fix's.
    assert one(rows, "build.3", "completed")["result"] == FIXED
    # Its tokens are its own: the fork's usage went on from build.1's total.
    assert one(rows, "build.1", "completed")["tokens"] == {
        "input": 1000,
        "output": 50,
        "total": 1050,
    }
    assert one(rows, "build.3", "completed")["tokens"] == {"input": 300, "output": 30, "total": 330}
    assert one(rows, "build.4", "completed")["result"] == ACCEPT
    assert "fixed parser.py" in one(rows, "ship.1", "step_published")["input"]
    assert rows[-1]["state"]["build"] == "completed"


async def test_a_rejection_after_the_last_round_holds_the_review_call(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """A review that rejects after the last fix round ends held review_rejected,
    keeping the reviewer's answer; the node's needers never run."""
    async with open_sim_host(tmp_path / "home") as sim:
        made = await reviewed(sim, tmp_path)
        await made.request(
            "sim/script", {"match": {"marker": "build.4/*"}, "behaviour": {"answer": REJECT}}
        )
        assert await made.process() == "waiting_decision"
        rows = made.rows()
    assert kinds(rows, "build.4") == [*BODY[:-1], "held"]
    held = one(rows, "build.4", "held")
    assert (held["reason"], held["result"]) == ("review_rejected", REJECT)
    assert "the summary names no file" in held["error"]
    assert not of(rows, "build.5", "prepared") and not of(rows, "ship.1", "prepared")
    assert not [r for r in rows if r["row"] == "ended"]


async def test_a_process_killed_between_review_and_fix_goes_on_from_the_checkpoint(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: ATT-39, ATT-37, ATT-38, ATT-40, STEP-58"""
    async with open_sim_host(tmp_path / "home") as sim:
        ref = await reviewed(sim, tmp_path, name="ref")
        assert await ref.process() == "ended"
        made = await reviewed(sim, tmp_path)  # the run dir as long as "ref"
        assert await made.process(kill_after("completed", call="build.2")) is None
        assert not of(made.rows(), "build.3", "prepared")
        async with open_journal_writer(made.journal, clock=fixed_clock()) as journal:
            await journal.commit([Started(backend="app-server", process="p2")])
        assert await made.process() == "ended"
        rows = made.rows()
        thread = made.thread("build.3")
        handle = made.thread("build.1")
        counts = turns_by_marker(made)
    assert kinds(rows, "build.3") == [
        "prepared",
        "checkpoint_started",
        "step_published",
        "thread_started",
        "turn_started",
        "completed",
    ]
    prepared, checkpoint = (
        of(rows, "build.3", "prepared")[0],
        one(rows, "build.3", "checkpoint_started"),
    )
    assert checkpoint["seq"] == prepared["seq"] + 1
    assert (checkpoint["handle"], checkpoint["branch"]) == ("build.1", "checkpoint")
    # Never a fork: a thread started anew, its turn text the journal's record.
    assert thread.forked_from_id is None and thread.id != handle.id
    assert thread.config == {KEY: TMPDIR}
    assert one(rows, "build.1", "step_published")["input"] in host_text(made, "build.3")
    # No call ran twice, no turn was sent twice, and the run ends as undisturbed.
    assert [r["call"] for r in rows if r["row"] == "prepared"] == [
        "build.1",
        "build.2",
        "build.3",
        "build.4",
        "ship.1",
    ]
    assert set(counts.values()) == {1}
    ends = {r["call"]: r["result"] for r in rows if r["row"] == "completed"}
    assert ends == {r["call"]: r["result"] for r in ref.rows() if r["row"] == "completed"}
    assert rows[-1]["row"] == "ended" and rows[-1]["status"] == "completed"


@pytest.mark.parametrize(
    ("kind", "call"),
    [
        ("completed", "build.1"),
        ("turn_started", "build.2"),
        ("prepared", "build.3"),
        ("thread_started", "build.3"),
        ("turn_started", "build.3"),
        ("completed", "build.3"),
        ("turn_started", "build.4"),
    ],
)
async def test_a_round_killed_anywhere_goes_on_in_place_to_the_same_results(
    tmp_path: Path, autojump_clock: MockClock, kind: str, call: str
) -> None:
    """spec: ATT-39, STEP-59, STEP-61: a process killed inside a round is resumed;
    each call is prepared once, no turn is sent twice, no answer is lost, and the
    fix counts its own tokens on whichever thread it runs."""
    async with open_sim_host(tmp_path / "home") as sim:
        ref = await reviewed(sim, tmp_path, name="ref")
        assert await ref.process() == "ended"
        made = await reviewed(sim, tmp_path)
        assert await made.process(kill_after(kind, call=call)) is None
        async with open_journal_writer(made.journal, clock=fixed_clock()) as journal:
            await journal.commit([Started(backend="app-server", process="p2")])
        assert await made.process() == "ended"
        rows = made.rows()
        counts = turns_by_marker(made)
    prepared = [r["call"] for r in rows if r["row"] == "prepared"]
    assert prepared == ["build.1", "build.2", "build.3", "build.4", "ship.1"]
    assert set(counts.values()) == {1}
    ended = {r["call"]: (r["result"], r["tokens"]) for r in rows if r["row"] == "completed"}
    assert ended == {
        r["call"]: (r["result"], r["tokens"]) for r in ref.rows() if r["row"] == "completed"
    }
    fork = made.thread("build.3").forked_from_id is not None
    assert fork == (not of(rows, "build.3", "checkpoint_started"))
    # The fork was made before the kill, or after it the fix took the checkpoint.
    forked_before = {"thread_started", "turn_started", "completed"} if call == "build.3" else set()
    assert fork == (kind in forked_before or call == "build.4")


async def paused_at(h: Harness, call: str) -> tuple[str, Rows]:
    """Run the workflow with the run's control; a pause is asked through the run's
    inbox once `call`'s turn started."""
    run = RunDir(h.run_dir)
    run.inbox.mkdir(exist_ok=True)
    path = h.run_dir / "journal.jsonl"
    control = RunControl(run=run)

    async def pause() -> None:
        while True:
            if of(read_journal(path).rows, call, "turn_started"):
                break
            await trio.sleep(0.05)
        requests.write_request(run, requests.Request.new(run.id, "pause", "t"))

    async with open_journal_writer(path, clock=fixed_clock()) as journal, trio.open_nursery() as n:
        ctx = CallContext(
            journal=journal,
            reader=h.reader,
            workflow=h.workflow,
            run_dir=h.run_dir,
            tmpdir=TMPDIR,
            pairs=RoleTable.undecided().roles,
            control=control,
        )
        await n.start(control.watch)
        n.start_soon(pause)
        state = await run_app_server_calls(ctx, ctx.workflow.pool, RunState())
        n.cancel_scope.cancel()
    return state, read_journal(path).rows


async def test_a_fix_the_pause_held_goes_on_on_its_fork_when_the_run_resumes(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: ATT-32, ATT-43, ATT-44, HARV-28: the paused fix's turn is taken again by
    a new turn on the fix's own thread (the fork), at its conversation place; the
    round then goes on to the review of the fix."""
    async with harness(tmp_path, REVIEWED) as h:
        await h.script({"marker": "build.2/*"}, answer=REJECT)
        await h.script({"marker": "build.3/*"}, hang=True)
        state, rows = await paused_at(h, "build.3")
        assert state == "paused"
        assert kinds(rows, "build.3")[-2:] == ["interrupt_requested", "held"]
        await h.script({"marker": "build.3/t2-*"}, answer=FIXED)
        await h.script({"marker": "build.4/*"}, answer=ACCEPT)
        state, rows = await h.run(replayed(rows))
        fork = h.sim.state.threads[one(rows, "build.3", "thread_started")["thread_id"]]
    assert state == "ended" and rows[-1]["status"] == "completed"
    assert kinds(rows, "build.3") == [
        "prepared",
        "step_published",
        "thread_started",
        "turn_started",
        "interrupt_requested",
        "held",
        "step_published",
        "turn_started",
        "completed",
    ]
    assert fork.forked_from_id == one(rows, "build.1", "thread_started")["thread_id"]
    again = of(rows, "build.3", "step_published")[-1]
    assert (again["marker"], again["conversation_turn"], again["replaces_turn"]) == (
        "build.3/t2-a2",
        1,
        "build.3/t1-a1",
    )
    assert one(rows, "build.3", "completed")["result"] == FIXED
    assert one(rows, "build.4", "completed")["result"] == ACCEPT
    assert [r["call"] for r in rows if r["row"] == "prepared"] == [
        "build.1",
        "build.2",
        "build.3",
        "build.4",
        "ship.1",
    ]


async def test_a_fix_whose_role_pair_differs_from_the_handles_thread_is_refused(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: DISP-21, DISP-23: a resumed process whose role table decides another
    model for the executor than build.1's thread ran refuses the fix: prepared,
    then held pair_refused naming both, and nothing is forked or started."""
    async with open_sim_host(tmp_path / "home") as sim:
        made = await reviewed(sim, tmp_path)
        assert await made.process(kill_after("completed", call="build.2")) is None
        threads = len(sim.state.threads)
        roles = RoleTable.undecided().roles
        made.pairs = {**roles, "executor": RolePair(agent_type="worker", model="gpt-other")}
        assert await made.process() == "waiting_decision"
        rows = made.rows()
        assert len(sim.state.threads) == threads
    ran = one(rows, "build.1", "thread_started")
    assert kinds(rows, "build.3") == ["prepared", "held"]
    assert one(rows, "build.3", "prepared")["resume"] == "build.1"
    held = one(rows, "build.3", "held")
    assert held["reason"] == "pair_refused"
    assert held["error"] == (
        f"the role's model is gpt-other, the subagent {ran['thread_id']} it continues ran "
        f"{ran['model']}"
    )
    assert not of(rows, "build.4", "prepared") and not of(rows, "ship.1", "prepared")


async def test_a_second_fix_forks_the_first_fix_and_carries_the_whole_chain(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: ATT-41, ATT-49, STEP-58: build.5 continues build.3 (resume: build.3) on a
    fork of build.3's thread; its record holds build.1's turn, then build.3's; its
    digest keeps the thread chain in order; its tokens are its own."""
    async with open_sim_host(tmp_path / "home") as sim:
        made = await reviewed(sim, tmp_path, rounds=2)
        for marker, behaviour in (
            ("build.4/*", {"seconds": 5, "answer": REJECT}),
            ("build.5/*", {"seconds": 5, "answer": FIXED, "tokens": {"input": 70, "output": 7}}),
            ("build.6/*", {"seconds": 5, "answer": ACCEPT}),
        ):
            await made.request("sim/script", {"match": {"marker": marker}, "behaviour": behaviour})
        assert await made.process() == "ended"
        rows = made.rows()
        second = made.thread("build.5")
        chain = [made.thread(call).id for call in ("build.1", "build.3")]
    assert [r["call"] for r in rows if r["row"] == "prepared"] == [
        *(f"build.{n}" for n in range(1, 7)),
        "ship.1",
    ]
    fix = one(rows, "build.5", "prepared")
    assert fix["resume"] == "build.3"
    assert second.forked_from_id == chain[1] and second.config == {KEY: TMPDIR}
    journaled = one(rows, "build.5", "step_published")["input"]
    assert journaled.index("### build.1 turn 1 (t1-a1)") < journaled.index(
        "### build.3 turn 1 (t1-a1)"
    )
    task = journaled.split("## Task\n\n", 1)[1].rsplit("\n\n## Output contract", 1)[0]
    schema = load_workflow(tmp_path / "wf.toml").nodes[0].output_schema
    expected = {"task": task, "schema": schema, "resume": "build.3", "threads": chain}
    assert fix["input_digest"] == answer.digest(expected)
    assert one(rows, "build.5", "completed")["tokens"] == {"input": 70, "output": 7, "total": 77}
    assert rows[-1]["state"]["build"] == "completed"


async def test_a_fix_effort_other_than_the_effort_the_handles_thread_ran_is_refused(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: DISP-24: on the app-server backend too, the review's fix_effort (the
    executor's effort undecided) is compared with the effort build.1's thread ran
    (a host that reports medium): the fix is prepared, then held pair_refused
    naming both efforts; nothing is forked."""
    reported = SimState.new_thread

    def medium(self: SimState, thread_id: str, params: dict[str, Any], **kw: Any) -> Any:
        thread = reported(self, thread_id, params, **kw)
        thread.reasoning_effort = thread.reasoning_effort or "medium"
        return thread

    monkeypatch.setattr(SimState, "new_thread", medium)
    async with open_sim_host(tmp_path / "home") as sim:
        made = await reviewed(sim, tmp_path)
        wf = tmp_path / "wf.toml"
        wf.write_text(wf.read_text().replace("rounds = 1 }", 'rounds = 1, fix_effort = "high" }'))
        made.workflow = load_workflow(wf)
        threads = len(sim.state.threads)
        assert await made.process() == "waiting_decision"
        rows = made.rows()
    ran = one(rows, "build.1", "thread_started")
    assert ran["effort"] == "medium"
    assert kinds(rows, "build.3") == ["prepared", "held"]
    held = one(rows, "build.3", "held")
    assert held["reason"] == "pair_refused"
    assert held["error"] == (
        f"the continuation asks effort high (the role leaves it undecided), the subagent "
        f"{ran['thread_id']} it continues ran effort medium"
    )
    assert len(sim.state.threads) == threads + 2  # build.1 and build.2, no fork
