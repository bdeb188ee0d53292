"""The app-server backend end to end on the real `codex app-server`, offline.

The same chain as tests/actors/test_app_server_run.py (explorer -> executor ->
reviewer), run by the real actors (journal writer, host reader, call tasks) on
the real host with the mock model behind it: once as a private stdio child
(`codex`), once as a shared server on a unix socket (`unix:PATH`). The clock is
real (codex is another process); each run is bounded by RUN_LIMIT. Each test
asserts the rows written: their kinds, fields and order.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import trio

from crw.actors.app_server_context import CallContext
from crw.actors.app_server_run import run_app_server_calls
from crw.actors.host_reader import open_host_reader
from crw.actors.journal_writer import open_journal_writer
from crw.actors.thread_watches import FOLLOWED_APP_SERVER
from crw.clock import fixed_clock
from crw.engine.config.roles import RoleTable
from crw.engine.config.workflow import load_workflow
from crw.host.connect import connect_host
from crw.host.mock_model import MockModel
from crw.host.mock_replies import FunctionCall, Usage, calls, fail, invalid, valid
from crw.host.uri import HostUri, parse_host_uri
from crw.journal.log import read_journal
from crw.journal.replay import RunState, replay
from crw.settings import Settings
from tests.actors.test_app_server_resume import Killed, kill_after
from tests.actors.test_app_server_run import CHAIN, kinds, repaired_once, terminal
from tests.host.codex_env import CODEX_MODEL, codex_env

pytestmark = pytest.mark.codex

RUN_LIMIT = 60.0
"""A whole workflow run on the real host takes well under a second here."""
POLL = 0.01
"""The reader's fallback poll, short so the run reads each thread at every stage
of its turns (codex's notifications wake it sooner as well)."""
CALLS = ("explore.1", "build.1", "review.1")
CALM = ["prepared", "step_published", "thread_started", "turn_started", "completed"]

Rows = list[dict[str, Any]]
RunChain = Callable[..., Awaitable[tuple[str | None, Rows]]]


@pytest.fixture(params=["codex", "unix"])
def host_uri(request: pytest.FixtureRequest) -> HostUri:
    """`codex` (a private stdio child per run) or `unix:PATH` of a shared server."""
    if request.param == "codex":
        return parse_host_uri("codex")
    server = request.getfixturevalue("shared_codex_server")
    return parse_host_uri(f"unix:{server.socket_path}")


@pytest.fixture
def run_chain(tmp_path: Path, host_uri: HostUri, codex_home_dir: Path) -> RunChain:
    """Run CHAIN on the host, on from the journal's rows; returns (the state the
    run leaves, None when `kill` killed it, and its rows)."""
    (tmp_path / "wf.toml").write_text(CHAIN)
    workflow = load_workflow(tmp_path / "wf.toml")
    run_dir, run_tmp = tmp_path / "run", tmp_path / "run" / "tmp"
    run_tmp.mkdir(parents=True)
    journal_path = run_dir / "journal.jsonl"

    async def run(kill: Any = None) -> tuple[str | None, Rows]:
        rows, state = read_journal(journal_path).rows, None
        with trio.fail_after(RUN_LIMIT):
            async with (
                connect_host(
                    host_uri,
                    env=codex_env(codex_home_dir),
                    stderr=tmp_path / "codex.log",
                    follows=FOLLOWED_APP_SERVER,
                ) as client,
                open_host_reader(
                    client, Settings(host_poll_interval=POLL), follows=FOLLOWED_APP_SERVER
                ) as reader,
                open_journal_writer(
                    journal_path, clock=fixed_clock(), after_commit=kill
                ) as journal,
            ):
                ctx = CallContext(
                    journal=journal,
                    reader=reader,
                    workflow=workflow,
                    run_dir=run_dir,
                    tmpdir=str(run_tmp),
                    pairs=RoleTable.undecided().roles,
                )
                try:
                    state = await run_app_server_calls(ctx, workflow.pool, replayed(rows), rows)
                except* Killed:
                    pass
        return state, read_journal(journal_path).rows

    return run


def ended_so(end: dict[str, Any], tmp_path: Path) -> str:
    """What a failure names of a call that ended otherwise than the test says: its
    terminal row, and the last lines of the codex logs (a private child's
    codex.log, a shared server's app-server.log)."""
    logs = [
        f"--- {log.name}:\n" + "\n".join(log.read_text(errors="replace").splitlines()[-20:])
        for log in sorted(tmp_path.glob("*.log"))
    ]
    return "\n".join([f"the call ended {end}", *logs])


def row_tokens(usage: Usage) -> dict[str, int]:
    """The tokens a row records for one model response of `usage`, as codex
    reports them (total included: codex passes the response's total_tokens on)."""
    parts = {
        "input": usage.input_tokens,
        "cached_input": usage.cached_tokens,
        "output": usage.output_tokens,
        "reasoning_output": usage.reasoning_tokens,
        "total": usage.total,
    }
    return {name: n for name, n in parts.items() if n}


def plus(a: Usage, b: Usage) -> Usage:
    return Usage(
        a.input_tokens + b.input_tokens,
        a.cached_tokens + b.cached_tokens,
        a.output_tokens + b.output_tokens,
        a.reasoning_tokens + b.reasoning_tokens,
        a.total + b.total,
    )


def replayed(rows: Rows) -> RunState:
    """The run's state with the started row the run process writes first."""
    return replay([{"seq": 0, "row": "started", "backend": "app-server"}, *rows])


def markers_asked(model: MockModel) -> list[str]:
    """The marker line of each model request codex made for a turn, in order."""
    return [r.user_text.splitlines()[0] for r in model.requests if r.reply is not None]


async def test_chain_completes_every_call_with_the_tokens_the_model_reported(
    run_chain: RunChain, mock_model: MockModel
) -> None:
    """spec: HARV-18, HARV-19, HARV-25"""
    usages = {
        "explore.1": Usage(1200, 200, 80, 30),
        "build.1": Usage(2100, 700, 130, 0),
        "review.1": Usage(3300, 1500, 60, 25, total_tokens=3400),
    }
    for call, usage in usages.items():
        mock_model.script(f"crw-flow-op: {call}/t1-a1", valid(usage=usage))
    state, rows = await run_chain()

    assert state == "ended"
    for call in CALLS:
        assert kinds(rows, call) == CALM, call
    prepared = [r for r in rows if r["row"] == "prepared"]
    assert [(r["call"], r["backend"]) for r in prepared] == [(c, "app-server") for c in CALLS]
    for call, usage in usages.items():
        done = terminal(rows, call)
        assert done["tokens"] == row_tokens(usage), call
        assert (done["k"], done["attempt"], done["extracted"]) == (1, 1, False)
    started = next(r for r in rows if r["row"] == "thread_started" and r["call"] == "build.1")
    assert started["via"] == "app-server" and started["model"] == CODEX_MODEL
    assert await trio.Path(started["rollout_path"]).is_file()
    assert terminal(rows, "build.1")["result"] == {"summary": "x"}
    assert rows[-1]["row"] == "ended" and rows[-1]["status"] == "completed"
    assert rows[-1]["state"] == dict.fromkeys(("explore", "build", "review"), "completed")
    assert markers_asked(mock_model) == [f"crw-flow-op: {call}/t1-a1" for call in CALLS]
    assert replayed(rows).state == "ended"


async def test_answer_that_breaks_the_schema_gets_one_repair_turn(
    run_chain: RunChain, mock_model: MockModel
) -> None:
    """spec: HARV-9, HARV-25"""
    first, second = Usage(900, 100, 40, 5), Usage(1500, 900, 20, 0)
    mock_model.script("crw-flow-op: build.1/", invalid(usage=first), valid(usage=second))
    state, rows = await run_chain()

    turns = repaired_once(rows, "build.1")
    assert turns[0]["turn_id"] != turns[1]["turn_id"]
    done = terminal(rows, "build.1")
    assert done["k"] == 2 and done["result"] == {"summary": "x"}
    assert done["tokens"] == row_tokens(plus(first, second))
    assert markers_asked(mock_model) == [
        "crw-flow-op: explore.1/t1-a1",
        "crw-flow-op: build.1/t1-a1",
        "crw-flow-op: build.1/t2-a1",
        "crw-flow-op: review.1/t1-a1",
    ]
    assert state == "ended" and rows[-1]["status"] == "completed"


async def test_context_window_exceeded_is_null_model_and_leaves_dependents_unrun(
    run_chain: RunChain, mock_model: MockModel, tmp_path: Path
) -> None:
    """spec: HARV-11, HARV-13"""
    mock_model.script("crw-flow-op: build.1/", fail("context_length_exceeded"))
    state, rows = await run_chain()

    assert kinds(rows, "explore.1") == CALM
    end = terminal(rows, "build.1")
    assert kinds(rows, "build.1") == [*CALM[:-1], "null_model"], ended_so(end, tmp_path)
    assert end["reason"] == "context_window_exceeded"
    assert kinds(rows, "review.1") == []
    assert state == "ended" and kinds(rows)[-1] == "ended"
    assert rows[-1]["status"] == "failed"
    assert rows[-1]["state"] == {"explore": "completed", "build": "null_model", "review": "unrun"}
    assert markers_asked(mock_model) == [
        "crw-flow-op: explore.1/t1-a1",
        "crw-flow-op: build.1/t1-a1",
    ]


async def test_reader_reads_a_thread_that_has_no_turn_yet(
    host_uri: HostUri, codex_home_dir: Path, tmp_path: Path
) -> None:
    """What a call's first wait_turn can meet, every time."""
    env = codex_env(codex_home_dir)
    with trio.fail_after(RUN_LIMIT):
        async with (
            connect_host(host_uri, env=env, stderr=tmp_path / "codex.log") as client,
            open_host_reader(client, Settings(host_poll_interval=POLL)) as reader,
        ):
            thread = await reader.start_thread(cwd=str(tmp_path))
            read = await reader.read(thread.id)
    assert read.id == thread.id and read.turns == []


async def test_context_window_exceeded_counts_no_tokens_for_the_failed_turn(
    run_chain: RunChain, mock_model: MockModel, tmp_path: Path
) -> None:
    """The failed response counted nothing; the row says so. spec: HARV-13, HARV-25"""
    mock_model.script("crw-flow-op: build.1/", fail("context_length_exceeded"))
    _, rows = await run_chain()

    end = terminal(rows, "build.1")
    assert end["row"] == "null_model", ended_so(end, tmp_path)
    assert end.get("tokens", {}) == {}
    assert replayed(rows).spent["total"] == terminal(rows, "explore.1")["tokens"]["total"]


async def test_usage_limit_holds_the_call_and_pauses_the_run(
    run_chain: RunChain, mock_model: MockModel
) -> None:
    """spec: HARV-11, HARV-12"""
    mock_model.script("crw-flow-op: build.1/", fail("insufficient_quota"))
    state, rows = await run_chain()

    assert state == "paused"
    assert kinds(rows, "explore.1") == CALM
    assert kinds(rows, "build.1") == [*CALM[:-1], "held"]
    end = terminal(rows, "build.1")
    assert end["reason"] == "paused" and end["error"]
    assert end.get("tokens", {}) == {}
    assert kinds(rows)[-1] == "paused" and rows[-1]["reason"] == "usage_limit_exceeded"
    assert "review.1" not in {row.get("call") for row in rows}
    assert "ended" not in kinds(rows)
    assert markers_asked(mock_model) == [
        "crw-flow-op: explore.1/t1-a1",
        "crw-flow-op: build.1/t1-a1",
    ]
    assert replayed(rows).state == "paused"


async def test_call_left_open_goes_on_on_its_resumed_thread_with_the_leaf_keys(
    run_chain: RunChain, mock_model: MockModel, tmp_path: Path
) -> None:
    """spec: STEP-59, STEP-60, STEP-61 (the run is killed right after build.1's
    repair step is published; the next process resumes the thread with
    thread/resume and starts the repair turn on it once: with `codex`, a new
    private child on the same CODEX_HOME that sees the thread notLoaded and
    rebuilds it from its own configuration, so TMPDIR reaches the turn's shell
    through thread/resume's leaf keys alone)"""
    shell = calls(FunctionCall("exec_command", {"cmd": "echo T=$TMPDIR"}))
    mock_model.script("crw-flow-op: build.1/t1-a1", invalid())
    mock_model.script("crw-flow-op: build.1/t2-a1", shell, valid())
    state, rows = await run_chain(kill_after("step_published", nth=2))
    assert state is None and kinds(rows, "build.1")[-1] == "step_published", ended_so(
        {"state": state, "rows": [r for r in rows if r.get("call")]}, tmp_path
    )

    state, rows = await run_chain()
    assert state == "ended" and rows[-1]["status"] == "completed"
    assert kinds(rows, "build.1") == [*CALM[:-1], "step_published", "turn_started", "completed"]
    asked = markers_asked(mock_model)
    assert asked.count("crw-flow-op: build.1/t1-a1") == 1
    assert asked.count("crw-flow-op: build.1/t2-a1") == 2  # the tool call, then the answer
    outputs = [
        r.body["input"][-1]["output"]
        for r in mock_model.requests
        if (r.body.get("input") or [{}])[-1].get("type") == "function_call_output"
    ]
    assert len(outputs) == 1 and f"T={tmp_path / 'run' / 'tmp'}\n" in outputs[0]


async def test_thread_with_no_turn_is_not_resumed_but_started_anew(
    run_chain: RunChain, mock_model: MockModel
) -> None:
    """codex writes a thread's rollout with its first turn and refuses thread/resume
    of a thread that has none (`no rollout found`): the call killed right after its
    thread_started goes on on a new thread, and its turn is sent once."""
    state, rows = await run_chain(kill_after("thread_started"))
    assert state is None
    state, rows = await run_chain()
    assert state == "ended" and rows[-1]["status"] == "completed"
    assert kinds(rows, "build.1") == [*CALM[:3], *CALM[2:]]
    first, second = (
        r["thread_id"] for r in rows if r["row"] == "thread_started" and r["call"] == "build.1"
    )
    assert first != second
    assert markers_asked(mock_model).count("crw-flow-op: build.1/t1-a1") == 1
