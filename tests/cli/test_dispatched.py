"""`crw flow dispatched`: the report into the inbox, the run's reply, queued, exit codes.

The run's process is played by the test: it holds the run lock (so the run is
live) and answers the report from a thread while the command waits.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from crw.bus.inbox import Report, read_reports, write_reply
from crw.cli.owner.dispatched import NOT_HELD, reply_line
from crw.engine.config.workflow import load_workflow
from crw.engine.run.locks import run_lock
from crw.engine.run.rundir import RunDir
from crw.engine.run.runspec import RunSpec, WorkflowRef, write_run_spec
from crw.journal.log import encode_batch, encode_body, read_journal
from crw.journal.replay import replay
from crw.journal.rows import Ended, RowModel, Started
from tests.cli.conftest import EXAMPLES, Crw, Result
from tests.deadlines import AT_ONCE_WAIT, LOADED

REPORT_MEMBERS = {"id", "run", "call", "k", "attempt", "agent_id", "reported_at"}


WORKFLOW = EXAMPLES / "fix-issue.toml"


@pytest.fixture
def run(crw: Crw) -> RunDir:
    """Run r1 of crw/examples/fix-issue.toml (nodes explore and build), no row yet."""
    run = RunDir.of(crw.state, "r1")
    run.create()
    ref = WorkflowRef(path=str(WORKFLOW), digest=load_workflow(WORKFLOW).digest)
    write_run_spec(run.run_json, RunSpec(id="r1", workflow=ref, backend="session", pool=2))
    return run


def append_rows(run: RunDir, *rows: RowModel) -> None:
    """Commit `rows` as one batch, as the run's process does."""
    first = replay(read_journal(run.journal).rows).last_seq + 1
    with open(run.journal, "ab") as journal:
        journal.write(encode_batch(first, "2026-11-30T00:00:00Z", [encode_body(r) for r in rows]))


def dispatched(crw: Crw, *args: str, wait: str = "20") -> Result:
    timeout = max(60, float(wait) + LOADED)
    return crw(
        "flow",
        "dispatched",
        "r1",
        "build.1",
        "--agent",
        "thread-7",
        "--k",
        "1",
        "--attempt",
        "2",
        "--wait",
        wait,
        "--state",
        str(crw.state),
        *args,
        timeout=timeout,
    )


@contextlib.contextmanager
def live_run(run: RunDir, reply: dict[str, Any] | None) -> Iterator[list[Report]]:
    """Hold the run lock, and answer the first report with `reply` (None: never).
    Yields the reports answered."""
    answered: list[Report] = []
    stop = threading.Event()

    def answer() -> None:
        while not stop.wait(0.01):
            reports = read_reports(run)
            if reports:
                got = reports[0]
                members = {"call": got.call, "k": got.k, "attempt": got.attempt}
                write_reply(
                    run, {"id": got.id} | members | {"agent_id": got.agent_id} | (reply or {})
                )
                answered.append(got)
                return

    thread = threading.Thread(target=answer)
    with run_lock(run):
        if reply is not None:
            thread.start()
        try:
            yield answered
        finally:
            stop.set()
            if reply is not None:
                thread.join(timeout=10)


def inbox_reports(run: RunDir) -> list[dict[str, Any]]:
    return [json.loads(path.read_text()) for path in sorted(run.inbox.glob("*.json"))]


def test_report_to_a_run_no_process_holds_is_answered_queued(crw: Crw, run: RunDir) -> None:
    """spec: CMD-DISP-1, CMD-DISP-6, CMD-DISP-7, CMD-DISP-9, DISP-1"""
    started = time.monotonic()
    result = dispatched(crw, "--json", wait=str(AT_ONCE_WAIT))
    assert time.monotonic() - started < LOADED  # answered at once, not after its --wait
    assert result.code == 1, result.stderr
    out = result.json()
    assert out["reply"] == "queued" and out["reason"] == NOT_HELD
    assert (out["call"], out["k"], out["attempt"], out["agent_id"]) == ("build.1", 1, 2, "thread-7")
    [report] = inbox_reports(run)
    assert set(report) == REPORT_MEMBERS
    assert report["id"] == out["id"] and report["run"] == "r1"
    assert (report["call"], report["k"], report["attempt"]) == ("build.1", 1, 2)
    assert report["agent_id"] == "thread-7" and report["reported_at"].endswith("Z")


def test_report_file_is_renamed_into_the_inbox(crw: Crw, run: RunDir) -> None:
    """spec: CMD-DISP-2: no temporary name is left behind."""
    out = dispatched(crw, "--json").json()
    assert sorted(p.name for p in run.inbox.iterdir()) == [f"{out['id']}.json"]


def test_bound_reply_exits_0(crw: Crw, run: RunDir) -> None:
    """spec: CMD-DISP-3, CMD-DISP-4, CMD-DISP-5, DISP-2"""
    reply = {"reply": "bound", "reason": "the step's subagent", "warnings": ["pair_unchecked"]}
    with live_run(run, reply) as answered:
        result = dispatched(crw, "--json")
    assert result.code == 0, result.stderr
    out = result.json()
    assert out["reply"] == "bound" and out["warnings"] == ["pair_unchecked"]
    assert out["id"] == answered[0].id and out["agent_id"] == "thread-7"
    assert inbox_reports(run) == []


def test_bound_reply_prints_one_line(crw: Crw, run: RunDir) -> None:
    """spec: CMD-DISP-4"""
    with live_run(run, {"reply": "bound", "reason": "bound"}):
        result = dispatched(crw)
    assert result.code == 0, result.stderr
    assert result.stdout == "bound: build.1 attempt 2 is thread-7\n"


def test_pair_mismatch_exits_1_and_names_the_pair(crw: Crw, run: RunDir) -> None:
    """spec: CMD-DISP-6, DISP-7"""
    pair = {"agent_type": "executor", "model": "gpt-5.1-codex", "reasoning_effort": "high"}
    reply = {"reply": "pair_mismatch", "reason": "it runs another pair", "pair": pair}
    with live_run(run, reply):
        human = dispatched(crw)
    with live_run(run, reply):
        as_json = dispatched(crw, "--json")
    assert human.code == 1 and as_json.code == 1
    assert human.stdout == (
        "pair_mismatch: close thread-7 and spawn again with "
        "agent_type=executor model=gpt-5.1-codex reasoning_effort=high\n"
    )
    assert as_json.json()["pair"] == pair


@pytest.mark.parametrize("kind", ["retry", "refused", "close"])
def test_other_replies_exit_1(crw: Crw, run: RunDir, kind: str) -> None:
    """spec: CMD-DISP-6"""
    with live_run(run, {"reply": kind, "reason": "the spec's reason"}):
        result = dispatched(crw, "--json")
    assert result.code == 1, result.stderr
    assert result.json()["reply"] == kind


def test_run_that_does_not_answer_in_time_is_answered_queued(crw: Crw, run: RunDir) -> None:
    """spec: CMD-DISP-8, CMD-DISP-9"""
    with live_run(run, None):
        result = dispatched(crw, "--json", wait="0.3")
    assert result.code == 1, result.stderr
    out = result.json()
    assert out["reply"] == "queued"
    assert out["reason"] == (
        "the run did not answer within 0.3 s; it answers when it reaches the step"
    )
    assert [report["id"] for report in inbox_reports(run)] == [out["id"]]


def test_run_that_lets_go_while_waited_on_is_answered_queued(crw: Crw, run: RunDir) -> None:
    """spec: CMD-DISP-7: the process that held the run went away."""
    lock = run_lock(run)
    letting_go = threading.Timer(0.5, lock.release)
    letting_go.start()
    started = time.monotonic()
    result = dispatched(crw, "--json", wait=str(AT_ONCE_WAIT))
    letting_go.join()
    assert time.monotonic() - started < LOADED  # once the run let go, not after its --wait
    assert result.code == 1 and result.json()["reason"] == NOT_HELD


def test_run_that_ends_while_waited_on_is_answered_refused(crw: Crw, run: RunDir) -> None:
    """spec: CMD-DISP-6: the run ended and let go without a reply the report can read
    (an ended run's replies are removed): nothing will answer it, so it is refused."""
    append_rows(run, Started(backend="session"))
    lock = run_lock(run)

    def end() -> None:
        append_rows(run, Ended(status="completed"))
        lock.release()

    def end_once_reported() -> None:  # the command read a live run and wrote its report
        deadline = time.monotonic() + LOADED
        while not list(run.inbox.glob("*.json")) and time.monotonic() < deadline:
            time.sleep(0.01)
        end()

    ending = threading.Thread(target=end_once_reported)
    ending.start()
    result = dispatched(crw, "--json", wait="60")
    ending.join()
    assert [r["id"] for r in inbox_reports(run)] == [result.json()["id"]]
    assert result.code == 1 and result.json()["reply"] == "refused"
    assert result.json()["reason"] == (
        "the run has ended (completed); close thread-7 if it is still open, "
        "there is nothing more to report"
    )


def test_unknown_run_is_an_input_error(crw: Crw) -> None:
    result = dispatched(crw)
    assert result.code == 2
    assert '"r1" not found' in result.stderr and result.stderr.count("\n") == 1


@pytest.mark.parametrize(
    ("option", "value"), [("--k", "0"), ("--attempt", "0"), ("--wait", "-1"), ("--agent", "")]
)
def test_bad_option_is_an_input_error(crw: Crw, run: RunDir, option: str, value: str) -> None:
    args = {"--agent": "thread-7", "--k": "1", "--attempt": "1", "--wait": "1"} | {option: value}
    flat = [item for pair in args.items() for item in pair]
    result = crw("flow", "dispatched", "r1", "build.1", *flat, "--state", str(crw.state))
    assert result.code == 2, result.stderr
    assert inbox_reports(run) == []


@pytest.mark.parametrize("call", ["review.1", "build", "build.0", "build.x", "build.01", ".1"])
def test_call_the_workflow_does_not_have_is_an_input_error(
    crw: Crw, run: RunDir, call: str
) -> None:
    """Nothing is written: no report waits in the inbox for a call that never comes."""
    args = ["--agent", "thread-7", "--k", "1", "--attempt", "1", "--wait", "5"]
    result = crw("flow", "dispatched", "r1", call, *args, "--state", str(crw.state))
    assert result.code == 2, result.stderr
    assert (
        result.stderr.count("\n") == 1 and f'call "{call}" is not a call of run r1' in result.stderr
    )
    assert "explore, build" in result.stderr and "crw flow next" in result.stderr
    assert list(run.inbox.iterdir()) == [] and list(run.replies.iterdir()) == []


def test_call_a_row_of_the_run_names_is_the_runs(crw: Crw, run: RunDir) -> None:
    """spec: CMD-DISP-7 (a call of the run's rows is reported as any other)"""
    append_rows(run, Started(backend="session"))
    append_rows(run, RowModel.model_validate({"row": "prepared", "call": "gone.1"}))
    args = ["--agent", "thread-7", "--k", "1", "--attempt", "1", "--json"]
    result = crw("flow", "dispatched", "r1", "gone.1", *args, "--state", str(crw.state))
    assert result.code == 1 and result.json()["reply"] == "queued", result.stderr


def test_report_on_an_ended_run_is_refused_and_leaves_nothing(crw: Crw, run: RunDir) -> None:
    """spec: CMD-DISP-6: nothing answers a report once the run has ended."""
    append_rows(run, Started(backend="session"))
    append_rows(run, Ended(status="completed"))
    result = dispatched(crw, "--json")
    assert result.code == 1, result.stderr
    out = result.json()
    assert out["reply"] == "refused"
    assert out["reason"] == (
        "the run has ended (completed); close thread-7 if it is still open, "
        "there is nothing more to report"
    )
    assert (out["call"], out["k"], out["attempt"], out["agent_id"]) == ("build.1", 1, 2, "thread-7")
    assert list(run.inbox.iterdir()) == [] and list(run.replies.iterdir()) == []
    human = dispatched(crw)
    assert human.code == 1 and human.stdout.startswith("refused: the run has ended (completed)")


@pytest.mark.parametrize(
    ("reply", "line"),
    [
        (
            {"reply": "retry", "reason": "the host cannot be read yet"},
            "retry: the host cannot be read yet",
        ),
        ({"reply": "refused", "reason": "another run"}, "refused: another run"),
        (
            {"reply": "close", "reason": "the attempt ended", "agent_id": "t9"},
            "close: close t9 (the attempt ended)",
        ),
        (
            {
                "reply": "bound",
                "call": "a.1",
                "attempt": 1,
                "agent_id": "t",
                "warnings": ["effort_unchecked"],
            },
            "bound: a.1 attempt 1 is t (effort_unchecked)",
        ),
        (
            {"reply": "pair_mismatch", "agent_id": "t", "pair": {"agent_type": "x", "model": None}},
            "pair_mismatch: close t and spawn again with agent_type=x",
        ),
        ({"reply": "queued", "reason": NOT_HELD}, f"queued: {NOT_HELD}"),
    ],
)
def test_reply_line(reply: dict[str, Any], line: str) -> None:
    """spec: CMD-DISP-4"""
    assert reply_line(reply) == line
