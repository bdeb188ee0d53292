"""The app-server backend end to end on the simulated host, in one Trio run.

The run's actors (journal writer, host reader, call tasks) and the simulated host
share one MockClock, so a turn's `seconds` pass in no real time. Each test asserts
the rows written: their kinds, fields and order.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]
import pytest
import trio
from trio.testing import MockClock

from crw.actors.app_server_context import CallContext
from crw.actors.app_server_run import run_app_server_calls
from crw.actors.host_reader import HostReader, open_host_reader
from crw.actors.journal_writer import open_journal_writer
from crw.actors.thread_watches import FOLLOWED_APP_SERVER
from crw.clock import fixed_clock
from crw.engine.config.roles import RoleTable
from crw.engine.config.workflow import Workflow, load_workflow
from crw.host.client import HostClient, open_client
from crw.host.sim.connection import connect_in_memory
from crw.host.sim.server import SimHost, open_sim_host
from crw.journal.log import read_journal
from crw.journal.replay import RunState, replay
from crw.settings import DEFAULT_SETTINGS, INTERRUPTED_SETTLE_MIN, Settings

CHAIN = """
name = "chain"
pool = 2

[[node]]
id = "explore"
role = "explorer"
task = "Find the files."
schema.type = "object"
schema.required = ["files"]
schema.properties.files = { type = "array", items = { type = "string" } }

[[node]]
id = "build"
role = "executor"
needs = ["explore"]
task = "Fix it, starting from {explore.files}."
schema = { type = "object", required = ["summary"], properties = { summary = { type = "string" } } }

[[node]]
id = "review"
role = "reviewer"
needs = ["build"]
task = "Review: {build.summary}"
schema.type = "object"
schema.required = ["verdict"]
schema.properties.verdict = { enum = ["pass", "fail"] }
"""


@dataclass
class Harness:
    sim: SimHost
    client: HostClient
    reader: HostReader
    workflow: Workflow
    run_dir: Path
    settings: Settings = DEFAULT_SETTINGS

    async def script(self, match: dict[str, str], **behaviour: Any) -> None:
        await self.client.request("sim/script", {"match": match, "behaviour": behaviour})

    async def run(self, replayed: RunState | None = None) -> tuple[str, list[dict[str, Any]]]:
        journal_path = self.run_dir / "journal.jsonl"
        async with open_journal_writer(journal_path, clock=fixed_clock()) as journal:
            ctx = CallContext(
                journal=journal,
                reader=self.reader,
                workflow=self.workflow,
                run_dir=self.run_dir,
                tmpdir="/run/tmp",
                pairs=RoleTable.undecided().roles,
                settings=self.settings,
            )
            rows = read_journal(journal_path).rows
            state = await run_app_server_calls(
                ctx, self.workflow.pool, replayed or RunState(), rows
            )
        return state, read_journal(journal_path).rows


SLOW_POLL = Settings(host_poll_interval=30.0)
"""The reader's settings: the host's notifications wake it; its poll is a fallback."""


@asynccontextmanager
async def harness(
    tmp_path: Path, text: str = CHAIN, settings: Settings = SLOW_POLL
) -> AsyncIterator[Harness]:
    (tmp_path / "wf.toml").write_text(text)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    async with (
        open_sim_host(tmp_path / "codex-home") as sim,
        open_client(await connect_in_memory(sim), follows=FOLLOWED_APP_SERVER) as client,
        open_host_reader(client, settings, follows=FOLLOWED_APP_SERVER) as reader,
    ):
        yield Harness(sim, client, reader, load_workflow(tmp_path / "wf.toml"), run_dir)


def replayed(rows: list[dict[str, Any]]) -> RunState:
    """The run's state with the started row the run process writes first."""
    return replay([{"seq": 0, "row": "started", "backend": "app-server"}, *rows])


ONE_TURN = ["prepared", "step_published", "thread_started", "turn_started", "completed"]
"""A call's rows when its one turn answered at once, valid."""


def kinds(rows: list[dict[str, Any]], call: str | None = None) -> list[str]:
    return [row["row"] for row in rows if call is None or row.get("call") == call]


def terminal(rows: list[dict[str, Any]], call: str) -> dict[str, Any]:
    return next(
        r for r in rows if r.get("call") == call and r["row"] in {"completed", "null_model", "held"}
    )


def repaired_once(rows: list[dict[str, Any]], call: str) -> list[dict[str, Any]]:
    """HARV-9: `call`'s first answer broke its schema and one repair turn followed
    on its thread (k 2, the conversation's second turn). Returns its two
    turn_started rows."""
    assert kinds(rows, call) == [
        "prepared",
        "step_published",
        "thread_started",
        "turn_started",
        "step_published",
        "turn_started",
        "completed",
    ]
    turns = [r for r in rows if r["row"] == "turn_started" and r["call"] == call]
    assert [(t["k"], t["op"], t["marker"], t["conversation_turn"]) for t in turns] == [
        (1, f"{call}/t1", f"{call}/t1-a1", 1),
        (2, f"{call}/t2", f"{call}/t2-a1", 2),
    ]
    return turns


async def test_workflow_runs_every_call_in_needs_order_to_completed(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: GEN-9, HARV-2, HARV-6, HARV-7, CMD-START-4 (a thread per call)"""
    async with harness(tmp_path) as h:
        state, rows = await h.run()
    assert state == "ended"
    threads = [row["thread_id"] for row in rows if row["row"] == "thread_started"]
    assert len(threads) == len(set(threads)) == 3
    for call in ("explore.1", "build.1", "review.1"):
        assert kinds(rows, call) == ONE_TURN
    order = [row["call"] for row in rows if row["row"] == "prepared"]
    assert order == ["explore.1", "build.1", "review.1"]
    assert rows[-1]["row"] == "ended" and rows[-1]["status"] == "completed"
    assert rows[-1]["state"] == {
        "explore": "completed",
        "build": "completed",
        "review": "completed",
    }
    done = terminal(rows, "build.1")
    assert done["result"] == {"summary": "x"} and done["extracted"] is False
    assert done["result_digest"].startswith("sha256:") and "raw_text" not in done
    assert replayed(rows).state == "ended"


async def test_a_calls_directory_is_private_whatever_the_umask(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """What a run makes under its directory is the user's alone: a call's
    directory is 0700 under umask 0, as a session call's is."""
    before = os.umask(0)
    try:
        async with harness(tmp_path) as h:
            _, rows = await h.run()
    finally:
        os.umask(before)
    workspaces = [Path(r["allocation"]["workspace"]) for r in rows if r["row"] == "prepared"]
    assert len(workspaces) == 3
    assert {oct(path.stat().st_mode & 0o777) for path in workspaces} == {oct(0o700)}


async def test_prepared_row_records_the_allocation_and_thread_started_the_thread(
    tmp_path: Path,
) -> None:
    """spec: STEP-58, STEP-7"""
    async with harness(tmp_path) as h:
        _, rows = await h.run()
        prepared = next(r for r in rows if r["row"] == "prepared" and r["call"] == "explore.1")
        assert prepared["backend"] == "app-server" and prepared["node"] == "explore"
        workspace = prepared["allocation"]["workspace"]
        assert await trio.Path(workspace).is_dir()
        assert prepared["input_digest"].startswith("sha256:")
        started = next(r for r in rows if r["row"] == "thread_started" and r["call"] == "explore.1")
        assert started["cwd"] == workspace and started["via"] == "app-server"
        thread = h.sim.state.threads[started["thread_id"]]
        assert thread.config["shell_environment_policy.set.TMPDIR"] == "/run/tmp"
        assert started["rollout_path"] == str(thread.path)


async def test_turn_text_fills_the_task_from_earlier_results(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    async with harness(tmp_path) as h:
        await h.script({"marker": "explore.1/*"}, answer={"files": ["a.py"]})
        _, rows = await h.run()
        started = next(r for r in rows if r["row"] == "thread_started" and r["call"] == "build.1")
        thread = h.sim.state.threads[started["thread_id"]]
        text = thread.wire(include_turns=True)["turns"][0]["items"][0]["content"][0]["text"]
    assert text.startswith("crw-flow-op: build.1/t1-a1\nCRW-ROLE: executor\n")
    assert 'Fix it, starting from ["a.py"].' in text


async def test_tokens_are_what_the_host_counted_for_the_turn(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: HARV-18, HARV-19, HARV-25"""
    async with harness(tmp_path) as h:
        await h.script(
            {"marker": "explore.1/*"},
            tokens={"input": 1200, "cachedInput": 200, "output": 80, "reasoningOutput": 30},
        )
        _, rows = await h.run()
    assert terminal(rows, "explore.1")["tokens"] == {
        "input": 1200,
        "cached_input": 200,
        "output": 80,
        "reasoning_output": 30,
        "total": 1280,
    }
    assert replayed(rows).spent["total"] > 1280


async def test_a_long_turn_is_read_at_its_end_not_at_each_token_count(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: HARV-1, HARV-18 (the turn's end, its tokens the thread's total). A
    tool-using turn sends a token count after every model response; a read of
    the thread answers every item so far. Reading at each count would cost
    the turn's length squared in bytes; the call reads at the end (and at the
    poll), and counts every response's tokens. A turn the call has just started
    is not read before its end either: a read then finds it running."""
    async with harness(tmp_path) as h:
        await h.script({"marker": "explore.1/*"}, seconds=20, responses=40)
        before = h.reader.reads
        _, rows = await h.run()
    # Each call read its thread once, at its turn's end: none as its wait began,
    # none at explore.1's 39 working responses.
    assert h.reader.reads - before == 3
    assert kinds(rows, "explore.1") == ONE_TURN
    tokens = terminal(rows, "explore.1")["tokens"]
    assert tokens["input"] > 39 * 100 and tokens["output"] > 39 * 10  # every response's


async def test_answer_that_breaks_the_schema_gets_one_repair_turn(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: HARV-9"""
    async with harness(tmp_path) as h:
        await h.script({"marker": "build.1/*"}, invalidFirst=True)
        _, rows = await h.run()
    repaired_once(rows, "build.1")
    assert terminal(rows, "build.1")["k"] == 2
    assert rows[-1]["status"] == "completed"


async def test_a_read_answered_just_before_the_turn_ended_runs_no_repair_turn(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: HARV-2, HARV-9: each thread's first read is answered while its turn
    runs and delivered only once the turn's `turn/completed` was handled (one
    batch, the answer first). The call reads again and takes the answer: no
    repair turn, no step_published k 2 saying the answer held no JSON."""
    async with harness(tmp_path) as h:
        await h.script({}, seconds=5)
        read = h.client.thread_read
        delayed: set[str] = set()

        async def racing(thread_id: str, include_turns: bool = True) -> Any:
            answer = await read(thread_id, include_turns=include_turns)
            if thread_id not in delayed:
                delayed.add(thread_id)
                await trio.sleep(10)  # the 5 s turn ends and its end is handled
            return answer

        monkeypatch.setattr(h.client, "thread_read", racing)
        _, rows = await h.run()
    assert len(delayed) == 3
    for call in ("explore.1", "build.1", "review.1"):
        assert kinds(rows, call) == ONE_TURN
    assert terminal(rows, "build.1")["result"] == {"summary": "x"}


async def test_answer_still_invalid_after_its_repair_is_null_model(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: HARV-10"""
    async with harness(tmp_path) as h:
        await h.script({"marker": "build.1/*"}, answer={"wrong": 1})
        state, rows = await h.run()
    end = terminal(rows, "build.1")
    assert end["row"] == "null_model" and end["reason"] == "schema_invalid_after_repair"
    assert any("summary" in error for error in end["errors"])
    assert kinds(rows, "review.1") == []
    assert state == "ended" and rows[-1]["status"] == "failed"
    assert rows[-1]["state"]["review"] == "unrun"


async def test_prose_before_the_json_is_extracted(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: HARV-5, HARV-7"""
    async with harness(tmp_path) as h:
        await h.script({"marker": "explore.1/*"}, answer={"files": ["a.py"]}, prose="Here it is:\n")
        _, rows = await h.run()
    end = terminal(rows, "explore.1")
    assert end["result"] == {"files": ["a.py"]} and end["extracted"] is True
    assert end["raw_text"].startswith("Here it is:")


async def test_commentary_is_no_answer_and_gets_the_repair(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: HARV-4"""
    async with harness(tmp_path) as h:
        await h.script({"marker": "explore.1/t1-*"}, answer={"files": []}, phase="commentary")
        _, rows = await h.run()
    assert kinds(rows, "explore.1").count("turn_started") == 2
    assert terminal(rows, "explore.1")["row"] == "completed"


async def test_context_window_exceeded_is_null_model(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: HARV-11, HARV-13"""
    async with harness(tmp_path) as h:
        await h.script({"marker": "explore.1/*"}, fail="contextWindowExceeded")
        state, rows = await h.run()
    end = terminal(rows, "explore.1")
    assert end["row"] == "null_model" and end["reason"] == "context_window_exceeded"
    assert state == "ended" and rows[-1]["status"] == "failed"


async def test_context_window_exceeded_is_null_model_when_the_turn_reads_interrupted_first(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """codex sends the failing turn's `error {willRetry: false}` before its end, and
    meanwhile a read shows the turn interrupted with no error (its thread
    systemError): that error is the turn's, however long its end takes.
    spec: HARV-11, HARV-13"""
    async with harness(tmp_path) as h:
        # longer than the reader's host_poll_interval (30 s): a read shows it interrupted twice
        await h.script({"marker": "explore.1/*"}, fail="contextWindowExceeded", lateEnd=120)
        state, rows = await h.run()
    end = terminal(rows, "explore.1")
    assert end["row"] == "null_model" and end["reason"] == "context_window_exceeded"
    assert state == "ended" and rows[-1]["status"] == "failed"


async def test_a_turn_read_interrupted_before_it_runs_is_waited_for_past_a_short_poll(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """codex shows a turn it has just started as interrupted, no error, on an idle
    thread, until it sets it running: with a poll interval shorter than that
    moment (10 ms; 0.3 s of it here) the call still completes on its one turn, as
    the reader believes such a read only after INTERRUPTED_SETTLE_MIN. spec: HARV-1"""
    async with harness(tmp_path, settings=Settings(host_poll_interval=0.01)) as h:
        await h.script({"marker": "build.1/*"}, lateStart=0.3)
        state, rows = await h.run()
    assert kinds(rows, "build.1") == ONE_TURN, rows
    assert state == "ended" and rows[-1]["status"] == "completed"


async def test_a_turn_read_interrupted_before_its_end_is_told_completes_under_a_short_poll(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """codex shows a completing turn as interrupted, no error, on an idle thread for
    a moment before `turn/completed`: with a 10 ms poll the call still completes
    with its answer. spec: HARV-1"""
    async with harness(tmp_path, settings=Settings(host_poll_interval=0.01)) as h:
        await h.script({"marker": "build.1/*"}, lateEnd=0.3)
        state, rows = await h.run()
    assert kinds(rows, "build.1") == ONE_TURN, rows
    assert terminal(rows, "build.1")["result"] is not None
    assert state == "ended" and rows[-1]["status"] == "completed"


async def test_a_turn_that_stays_interrupted_with_no_end_told_is_held_after_the_settle(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """The other side of the settle: a turn that reads interrupted with no error
    and whose end never comes is believed ended once INTERRUPTED_SETTLE_MIN has
    passed, and the call is held host_failure. spec: HARV-1, HARV-14"""
    async with harness(tmp_path, settings=Settings(host_poll_interval=0.01)) as h:
        await h.script({"marker": "explore.1/*"}, seconds=0)
        await h.script({"marker": "build.1/*"}, lateStart=3600)
        start = trio.current_time()
        state, rows = await h.run()
        took = trio.current_time() - start
    end = terminal(rows, "build.1")
    assert (end["row"], end["reason"], end["error"]) == (
        "held",
        "host_failure",
        "the turn was interrupted",
    )
    assert state == "waiting_decision"
    assert INTERRUPTED_SETTLE_MIN <= took < INTERRUPTED_SETTLE_MIN + 0.1


async def test_a_thread_whose_rollout_reads_empty_at_first_is_read_again(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: HARV-2. The host refuses explore.1's first reads as codex 0.169 does
    while a rollout file is made and not yet written ("rollout at <path> is
    empty", with its turns and without): the run reads it again and every call
    completes, as on a host that read it at once."""
    async with harness(tmp_path) as h:
        await h.script({"marker": "explore.1/*"}, emptyRollout=3)
        state, rows = await h.run()
    assert state == "ended"
    assert kinds(rows, "explore.1") == ONE_TURN
    assert rows[-1]["row"] == "ended" and rows[-1]["status"] == "completed"


async def test_usage_limit_pauses_the_run(tmp_path: Path, autojump_clock: MockClock) -> None:
    """spec: HARV-12"""
    async with harness(tmp_path) as h:
        await h.script({"marker": "explore.1/*"}, fail="usageLimitExceeded")
        state, rows = await h.run()
    assert state == "paused"
    end = terminal(rows, "explore.1")
    assert end["row"] == "held" and end["reason"] == "paused"
    assert kinds(rows)[-1] == "paused" and rows[-1]["reason"] == "usage_limit_exceeded"
    assert "build.1" not in {row.get("call") for row in rows}
    assert replayed(rows).state == "paused"


async def test_rate_limit_in_the_object_form_pauses_the_run(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: HARV-11, HARV-12 (codexErrorInfo `{"rateLimitExceeded": {...}}`)"""
    async with harness(tmp_path) as h:
        info = {"rateLimitExceeded": {"retryAfterSeconds": 30}}
        await h.script({"marker": "explore.1/*"}, fail=info)
        state, rows = await h.run()
    assert state == "paused" and rows[-1]["reason"] == "rate_limit_exceeded"
    end = terminal(rows, "explore.1")
    assert end["row"] == "held" and end["reason"] == "paused"


async def test_other_host_failure_holds_the_call(tmp_path: Path, autojump_clock: MockClock) -> None:
    """spec: HARV-14"""
    async with harness(tmp_path) as h:
        await h.script(
            {"marker": "explore.1/*"}, fail={"httpConnectionFailed": {"httpStatusCode": 502}}
        )
        state, rows = await h.run()
    end = terminal(rows, "explore.1")
    assert end["row"] == "held" and end["reason"] == "host_failure"
    assert state == "waiting_decision" and kinds(rows)[-1] == "held"
    assert replayed(rows).state == "waiting_decision"


async def test_independent_calls_run_together_within_the_pool(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    text = (
        CHAIN.replace('needs = ["explore"]\n', "")
        .replace('needs = ["build"]\n', "")
        .replace("{explore.files}", "files")
        .replace("{build.summary}", "it")
    )
    async with harness(tmp_path, text) as h:
        for node in ("explore", "build", "review"):
            await h.script({"marker": f"{node}.1/*"}, seconds=60)
        start = trio.current_time()
        _, rows = await h.run()
        elapsed = trio.current_time() - start
    prepared = [i for i, row in enumerate(rows) if row["row"] == "prepared"]
    assert prepared[:2] == [0, 2]  # the pool of 2 admits two at once (each with its step)
    assert 120 <= elapsed < 180  # two waves of 60 s, not three


async def test_default_answers_satisfy_their_schemas(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    async with harness(tmp_path) as h:
        _, rows = await h.run()
        for node in h.workflow.nodes:
            jsonschema.validate(terminal(rows, f"{node.id}.1")["result"], node.output_schema)


async def test_resumed_paused_run_takes_the_paused_turn_again_on_its_thread_and_ends(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """spec: ATT-32 (a call a pause held goes on in place on resume, as on the
    session path: a new turn on its thread at the next k and the same conversation
    place, never prepared anew)"""
    async with harness(tmp_path) as h:
        await h.script({"marker": "explore.1/*"}, fail="usageLimitExceeded")
        state, rows = await h.run()
        assert state == "paused"
        await h.script({"marker": "explore.1/*"}, answer={"files": ["b.py"]})
        state, rows = await h.run(replayed(rows))
        [thread_id] = [
            r["thread_id"]
            for r in rows
            if r["row"] == "thread_started" and r["call"] == "explore.1"
        ]
        turns = h.sim.state.threads[thread_id].wire(include_turns=True)["turns"]
        markers = [t["items"][0]["content"][0]["text"].split("\n", 1)[0] for t in turns]
    assert state == "ended" and rows[-1]["status"] == "completed"
    assert kinds(rows, "explore.1") == [
        "prepared",
        "step_published",
        "thread_started",
        "turn_started",
        "held",
        "step_published",
        "turn_started",
        "completed",
    ]
    again = [r for r in rows if r["row"] == "step_published" and r["call"] == "explore.1"][1]
    assert {
        k: again.get(k) for k in ("k", "marker", "attempt", "conversation_turn", "replaces_turn")
    } == {
        "k": 2,
        "marker": "explore.1/t2-a2",
        "attempt": 2,
        "conversation_turn": 1,
        "replaces_turn": "explore.1/t1-a1",
    }
    assert "and the run was resumed; this is attempt 2" in again["note"]
    assert markers == ["crw-flow-op: explore.1/t1-a1", "crw-flow-op: explore.1/t2-a2"]
    assert terminal(rows, "explore.1")["row"] == "held"  # the first end stays recorded
    assert rows[-1]["state"]["explore"] == "completed"
    assert replayed(rows).calls["explore.1"].result == {"files": ["b.py"]}


async def test_reader_keeps_nothing_of_a_finished_calls_thread(tmp_path: Path) -> None:
    """The run's memory grows with the calls in flight, not with the calls it ran:
    once a call ended, the reader holds no read of its thread."""
    async with harness(tmp_path) as h:
        state, _ = await h.run()
        assert state == "ended" and h.reader.reads > 0
        assert h.reader.watched == 0
