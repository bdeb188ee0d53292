"""`crw flow next` on run directories built by hand: run.json, a journal in the
framing of crw.journal.log, step files in the format of the file step bus."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from crw.binding.lines import append_lines
from crw.engine.config.role_names import ROLES, default_agent_type
from crw.engine.config.workflow import load_workflow
from crw.engine.run.locks import hold_run
from crw.engine.run.rundir import RunDir
from crw.engine.run.runspec import RunEnv, RunSpec, WorkflowRef, write_run_spec
from crw.journal.log import encode_batch, encode_body, read_journal
from crw.journal.rows import UnknownRow
from tests.cli.conftest import EXAMPLES, Crw, wait_for_exit
from tests.deadlines import AT_ONCE_WAIT, LOADED

RUN = "fix-20261129-000000-abcd"
WORKFLOW = EXAMPLES / "fix-issue.toml"


def _journal_line(seq: int, row: str, **fields: object) -> str:
    body = encode_body(UnknownRow.model_validate({"row": row, **fields}))
    return encode_batch(seq, "2026-11-29T00:00:00.000000Z", [body]).decode()


def _append_rows(run: RunDir, *rows: dict[str, Any]) -> None:
    """Append each row as a batch of its own after the journal's last row."""
    seq = read_journal(run.journal).last_seq
    with open(run.journal, "a") as journal:
        for offset, row in enumerate(rows, start=1):
            journal.write(_journal_line(seq + offset, **row))


def _make_run(crw: Crw) -> RunDir:
    run = new_run(crw)
    _append_rows(
        run,
        {"row": "started", "backend": "session", "pid": 1, "role_pairs": None},
        {"row": "prepared", "call": "build.1", "node": "build", "role": "executor"},
    )
    return run


def new_run(crw: Crw) -> RunDir:
    """The run directory and run.json of a session run of WORKFLOW, no row yet."""
    run = RunDir.of(crw.state, RUN)
    run.create()
    write_run_spec(
        run.run_json,
        RunSpec(
            id=RUN,
            workflow=WorkflowRef(path=str(WORKFLOW), digest=load_workflow(WORKFLOW).digest),
            backend="session",
            pool=2,
            host=f"unix:{crw.state / 'no-host.sock'}",  # a resumed process pauses at once
            owner="owner-thread",
            env=RunEnv(TMPDIR=crw.env["TMPDIR"]),
        ),
    )
    return run


def _step(
    run: RunDir, call: str, k: int = 1, attempt: int = 1, message: str | None = None
) -> dict[str, Any]:
    """Write a spawn step file (its packet first), atomically, as the run does."""
    directory = run.steps / call
    directory.mkdir(parents=True, exist_ok=True)
    packet = directory / f"packet-t{k}-a{attempt}.md"
    packet.write_text("# packet\n")
    step = {
        "call": call,
        "k": k,
        "attempt": attempt,
        "op": f"{call}/t{k}",
        "marker": f"{call}/t{k}-a{attempt}",
        "role": "executor",
        "action": "spawn",
        "agent_type": "executor",
        "model": None,
        "reasoning_effort": None,
        "message": message or f"crw-flow-op: {call}/t{k}-a{attempt}\nCRW-ROLE: executor\n",
        "packet": str(packet),
        "workspace": "/work/p",
        "agent_id": None,
    }
    _write_atomic(directory / f"t{k}-a{attempt}.json", step)
    return step


def _close(run: RunDir, call: str, attempt: int, agent: str) -> Path:
    directory = run.steps / call
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"close-a{attempt}-{agent}.json"
    _write_atomic(path, {"call": call, "attempt": attempt, "action": "close", "agent_id": agent})
    return path


def _write_atomic(path: Path, value: dict[str, Any]) -> None:
    temp = path.with_name(f".{path.name}.tmp")
    temp.write_text(json.dumps(value))
    temp.rename(path)


def _next(crw: Crw, *args: str, timeout: float = 60) -> dict[str, Any]:
    result = crw("flow", "next", RUN, "--state", str(crw.state), "--json", *args, timeout=timeout)
    assert result.code == 0, result.stderr
    return result.json()


@pytest.fixture
def held(crw: Crw) -> Iterator[RunDir]:
    """A run this test process holds, as its run process would (its started row
    names the process lock): next resumes nothing."""
    run = _make_run(crw)
    with hold_run(run) as process:
        assert process is not None
        _append_rows(run, {"row": "started", "backend": "session", "process": process.token})
        pairs = {role: {"agent_type": default_agent_type(role)} for role in ROLES}
        line = {"kind": "orchestrator", "run_id": RUN, "helperPairs": pairs}
        bind_line(crw, line)  # as the process binds it
        yield run


def bind_line(crw: Crw, line: dict[str, Any]) -> None:
    """Append `line` to the owner thread's flow-bound file."""
    directory = crw.state / "flow-bound"
    directory.mkdir(mode=0o700, exist_ok=True)
    append_lines(directory / "owner-thread.jsonl", [line])


def test_json_answers_the_state_steps_slots_spawn_formats_and_hint(crw: Crw, held: RunDir) -> None:
    """spec: CMD-NEXT-3, CMD-NEXT-4, CMD-NEXT-8, CMD-NEXT-9, CMD-NEXT-10"""
    (crw.state / "codex-home").mkdir()
    (crw.state / "codex-home" / "config.toml").write_text("[agents]\nmax_threads = 3\n")
    _append_rows(
        held,
        {"row": "thread_started", "call": "build.1", "thread_id": "thr-a", "attempt": 1},
        {"row": "session_attempt_lost", "call": "build.1", "reason": "gone"},
        {"row": "step_published", "call": "build.1", "k": 1, "attempt": 2, "action": "spawn"},
    )
    step = _step(held, "build.1", attempt=2)
    _close(held, "build.1", 1, "thr-a")
    out = _next(crw)
    assert set(out) == {
        "run",
        "state",
        "ended_status",
        "ended_state",
        "steps",
        "slots",
        "spawn_formats",
        "hint",
        "warnings",
    }
    assert out["warnings"] == []
    assert (out["run"], out["state"]) == (RUN, "waiting_session")
    assert [s["action"] for s in out["steps"]] == ["close", "spawn"]
    spawn = out["steps"][1]
    assert {k: v for k, v in spawn.items() if k not in ("host_call", "reported")} == {
        k: v for k, v in step.items() if k != "marker"
    }
    assert spawn["reported"] is False
    assert spawn["host_call"]["then"] == (
        f"crw flow dispatched {RUN} build.1 --agent <agent_id> --k 1 --attempt 2 "
        f"--state {crw.state}"
    )
    assert spawn["host_call"]["on_failure"] == (
        f"crw flow dispatched {RUN} build.1 --k 1 --attempt 2 --failed '<tool_output>' "
        f"--state {crw.state}"
    )
    assert "on_failure" not in out["steps"][0]["host_call"]  # a close reports nothing
    assert out["slots"] == {"limit": 3, "open": 1, "agents": ["thr-a"]}
    assert len(out["spawn_formats"]) == 6
    assert 'close_agent(target="thr-a")' in out["hint"]


def test_close_step_file_is_gone_once_next_handed_it_out(crw: Crw, held: RunDir) -> None:
    """spec: CMD-NEXT-15"""
    close = _close(held, "build.1", 1, "thr-a")
    _step(held, "build.1", attempt=2)
    first = _next(crw)
    assert [s["action"] for s in first["steps"]] == ["close", "spawn"]
    assert not close.exists()
    assert (held.steps / "build.1" / "t1-a2.json").exists()  # a spawn step stays
    assert [s["action"] for s in _next(crw)["steps"]] == ["spawn"]


def test_next_writes_no_row(crw: Crw, held: RunDir) -> None:
    """spec: CMD-NEXT-16"""
    _step(held, "build.1")
    before = held.journal.read_bytes()
    _next(crw)
    crw("flow", "next", RUN, "--state", str(crw.state))
    assert held.journal.read_bytes() == before


def test_wait_returns_as_soon_as_a_step_appears(crw: Crw, held: RunDir) -> None:
    """spec: CMD-NEXT-11"""
    writer = threading.Timer(0.3, _step, (held, "build.1"))
    writer.start()
    began = time.monotonic()
    try:
        out = _next(crw, "--wait", str(AT_ONCE_WAIT), timeout=AT_ONCE_WAIT + LOADED)
    finally:
        writer.join()
    assert time.monotonic() - began < LOADED  # not the AT_ONCE_WAIT it may wait
    assert [s["call"] for s in out["steps"]] == ["build.1"]


def test_wait_returns_when_the_state_changes(crw: Crw, held: RunDir) -> None:
    """spec: CMD-NEXT-11"""
    ended = {"row": "ended", "status": "completed", "state": {"build": "completed"}}
    writer = threading.Timer(0.3, _append_rows, (held, ended))
    writer.start()
    began = time.monotonic()
    try:
        out = _next(crw, "--wait", str(AT_ONCE_WAIT), timeout=AT_ONCE_WAIT + LOADED)
    finally:
        writer.join()
    assert time.monotonic() - began < LOADED  # not the AT_ONCE_WAIT it may wait
    assert (out["state"], out["ended_status"]) == ("ended", "completed")
    assert out["ended_state"] == {"build": "completed"}


def test_wait_runs_out_without_a_step(crw: Crw, held: RunDir) -> None:
    """spec: CMD-NEXT-11"""
    began = time.monotonic()
    out = _next(crw, "--wait", "0.5")
    assert time.monotonic() - began >= 0.5
    assert out["state"] == "running" and out["steps"] == []


def test_run_nobody_holds_is_resumed_and_the_answer_says_so(crw: Crw) -> None:
    """spec: CMD-NEXT-18, CMD-NEXT-19"""
    run = _make_run(crw)
    out = _next(crw)
    pid = out["resumed_pid"]
    assert isinstance(pid, int)
    crw.pids.append(pid)
    assert f"pid {pid}" in out["hint"]
    deadline = time.monotonic() + LOADED
    while len(_started_rows(run)) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    wait_for_exit(run.root)  # it finds no host and pauses
    assert [row["pid"] for row in _started_rows(run)] == [1, pid]
    assert read_journal(run.journal).rows[-1]["row"] == "paused"


def _started_rows(run: RunDir) -> list[dict[str, Any]]:
    return [row for row in read_journal(run.journal).rows if row["row"] == "started"]


def test_paused_run_is_not_resumed(crw: Crw) -> None:
    """spec: CMD-NEXT-20"""
    run = _make_run(crw)
    _append_rows(run, {"row": "paused", "reason": "host_unavailable"})
    before = run.journal.read_bytes()
    out = _next(crw)
    assert out["state"] == "paused" and "resumed_pid" not in out
    assert run.journal.read_bytes() == before


def test_human_form_shows_state_steps_slots_and_hint(crw: Crw, held: RunDir) -> None:
    """spec: CMD-NEXT-1, CMD-NEXT-5 (a spawn's `then` and `on_failure` lines)"""
    _step(held, "build.1")
    result = crw("flow", "next", RUN, "--state", str(crw.state))
    assert result.code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == f"run {RUN}: running"
    assert any(line.strip().startswith("spawn_agent {") for line in lines)
    assert any("then: crw flow dispatched" in line for line in lines)
    on_failure = [line.strip() for line in lines if "on_failure:" in line]
    assert on_failure == [
        f"on_failure: crw flow dispatched {RUN} build.1 --k 1 --attempt 1 "
        f"--failed '<tool_output>' --state {crw.state}"
    ]
    assert any(line.strip() == "slots: 0 of 6 open" for line in lines)
    assert lines[-1].startswith("hint: ")


SPAWN_MESSAGE = (
    "crw-flow-op: build.1/t1-a1\nCRW-ROLE: executor\n\nYour shell starts in a directory that "
    "is NOT your workspace. Your workspace is /work/p: run every command with workdir "
    "/work/p and edit only by absolute paths under /work/p.\nRead the task packet "
    + "/state/flow/r/steps/build.1/packet-t1-a1.md "
    * 4
    + "in full and follow it exactly. You are a leaf subagent: never spawn agents.\nYour "
    "final message is exactly the JSON object the packet names, and nothing else.\n"
)


def test_human_form_cuts_a_spawn_message_to_its_marker_and_names_the_packet(
    crw: Crw, held: RunDir
) -> None:
    """A person reads the step, not a 700-character line: the message's first line,
    its length, the packet; --json keeps the message whole."""
    step = _step(held, "build.1", message=SPAWN_MESSAGE)
    result = crw("flow", "next", RUN, "--state", str(crw.state))
    assert result.code == 0, result.stderr
    lines = result.stdout.splitlines()
    (call,) = [line for line in lines if line.strip().startswith("spawn_agent {")]
    assert '"message": "crw-flow-op: build.1/t1-a1\\n…"' in call
    assert len(call) < 160 and SPAWN_MESSAGE[100:140] not in result.stdout
    assert f"    message: {len(SPAWN_MESSAGE)} characters in all (--json has it whole)" in lines
    assert f"    packet: {step['packet']}" in lines
    whole = crw("flow", "next", RUN, "--state", str(crw.state), "--json").json()
    assert whole["steps"][0]["host_call"]["arguments"]["message"] == SPAWN_MESSAGE


def test_negative_wait_is_an_input_error(crw: Crw, held: RunDir) -> None:
    result = crw("flow", "next", RUN, "--state", str(crw.state), "--wait", "-1")
    assert result.code == 2 and "--wait" in result.stderr


def test_next_answers_from_the_holders_first_state_never_an_earlier_processs_step(
    crw: Crw, held: RunDir
) -> None:
    """spec: ATT-21, CMD-NEXT-28: a step file older than the holder's process lock is
    an earlier process's; next reads again until the holder wrote it again."""
    path = held.steps / "build.1" / "t1-a1.json"
    stale = _step(held, "build.1") | {"message": "the earlier process's step"}
    _write_atomic(path, stale)
    os.utime(path, ns=(time.time_ns() - 60 * 10**9,) * 2)  # written before the holder came
    writer = threading.Timer(1.0, _step, (held, "build.1"))
    writer.start()
    try:
        out = _next(crw)
    finally:
        writer.join()
    assert out["state"] == "running"
    assert [s["message"] for s in out["steps"]] == [_step(held, "build.1")["message"]]


def test_a_reported_step_is_marked_so_the_owner_spawns_nothing(crw: Crw, held: RunDir) -> None:
    """spec: ATT-18"""
    _step(held, "build.1")
    held.inbox.mkdir(exist_ok=True)
    report = {"id": "r1", "run": RUN, "call": "build.1", "k": 1, "attempt": 1,
              "agent_id": "thr-a", "reported_at": "2026-11-29T00:00:01Z"}  # fmt: skip
    (held.inbox / "r1.json").write_text(json.dumps(report))
    out = _next(crw)
    assert out["steps"][0]["reported"] is True
    assert "the run will answer it" in out["hint"]


def test_concurrent_nexts_launch_one_process(crw: Crw) -> None:
    """spec: CMD-NEXT-18, CMD-NEXT-30: at most one launch at a time per run."""
    run = _make_run(crw)
    argv = [sys.executable, "-m", "crw", "flow", "next", RUN, "--state", str(crw.state), "--json"]
    nexts = [
        subprocess.Popen(argv, env=crw.env, stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        for _ in range(6)
    ]  # fmt: skip
    outs = [json.loads(proc.communicate(timeout=60)[0]) for proc in nexts]
    pids = [out["resumed_pid"] for out in outs if "resumed_pid" in out]
    crw.pids += pids
    assert len(pids) == 1, outs
    wait_for_exit(run.root)
    time.sleep(0.5)
    assert [row["pid"] for row in _started_rows(run)] == [1, pids[0]]


def test_a_run_whose_calls_all_wait_on_a_decision_starts_no_process(crw: Crw) -> None:
    """spec: CMD-NEXT-2, CMD-NEXT-18"""
    run = _make_run(crw)
    _append_rows(
        run,
        {"row": "prepared", "call": "explore.1", "node": "explore", "role": "explorer"},
        {"row": "held", "call": "build.1", "reason": "attempts_exhausted"},
        {"row": "held", "call": "explore.1", "reason": "attempts_exhausted"},
    )
    before = run.journal.read_bytes()
    out = _next(crw, "--wait", "5")
    assert out["state"] == "waiting_decision" and "resumed_pid" not in out
    assert f"build.1 (attempts_exhausted): crw flow answer {RUN} build.1 --retry" in out["hint"]
    assert [held["call"] for held in out["held"]] == ["build.1", "explore.1"]
    time.sleep(0.5)
    assert run.journal.read_bytes() == before
    assert not run.log.exists() or b"started" not in run.log.read_bytes()


def test_a_process_never_cuts_off_an_ended_row_of_a_journal_that_reads_oddly(crw: Crw) -> None:
    """spec: CMD-START-2: an ended row that does not close its batch (no run writes
    one so: an edit) would read as a batch cut short, a torn tail the run process
    cuts before its started row, and the run as not ended. It is damage: the run
    process refuses, the ended run gets no started row, and the file is kept."""
    run = _make_run(crw)
    ended = {"row": "ended", "status": "completed", "state": {}}
    bodies = [encode_body(UnknownRow.model_validate(row)) for row in (ended, {"row": "paused"})]
    batch = encode_batch(read_journal(run.journal).last_seq + 1, "2026-11-29T00:00:00Z", bodies)
    with open(run.journal, "ab") as journal:
        journal.write(batch.splitlines(keepends=True)[0])
    before = run.journal.read_bytes()
    result = crw("flow", "_run", RUN, "--state", str(crw.state))
    assert result.code == 1, result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert "a batch cut short holds the run's ended row" in line and "corrupt" in line
    assert run.journal.read_bytes() == before


def test_a_process_for_an_ended_run_writes_no_row(crw: Crw) -> None:
    """spec: CMD-START-2: a run that ended gets no row from a late process."""
    run = _make_run(crw)
    _append_rows(run, {"row": "ended", "status": "completed", "state": {}})
    before = run.journal.read_bytes()
    result = crw("flow", "_run", RUN, "--state", str(crw.state))
    assert result.code == 1
    assert result.stderr.strip().splitlines() == [
        f"crw: error: run {RUN} has ended (completed); its process writes nothing"
    ]
    assert run.journal.read_bytes() == before
