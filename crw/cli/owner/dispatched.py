"""`crw flow dispatched RUN CALL (--agent ID | --failed TEXT) --k K --attempt N [--wait S]`.

The owner reports what it dispatched for a step (CMD-DISP-1): the command writes a
dispatch report into the run's inbox under a temporary name and renames it
(CMD-DISP-2), then waits up to S seconds for the run's reply (CMD-DISP-3) and prints
it (CMD-DISP-4). A run no process holds, or one that does not answer in time, is
answered `queued`: the report stays in the inbox and the run answers it when it
reaches the step (CMD-DISP-7..9). Exit 0 on bound, 1 on every other reply, queued
included (CMD-DISP-5, CMD-DISP-6).

Before anything is written: a call the run's workflow does not have is an input
error (exit 2), and a run that has ended answers `refused` at once (exit 1); the
inbox is left as it was.

A report of a spawn the host refused (`--failed '<tool_output>'`, no
subagent) holds the call `spawn_failed` with that output: the run answers it
`held` (exit 0) and `crw flow next` / `crw flow status` show the call with its
fix. It is refused (exit 1) before anything is written unless it names the step
its call waits on, and only once: a second one, or one while the first waits in
the inbox, changes nothing.

This is a short-lived CLI process: it waits for its reply on an inotify watch of
the replies directory (a poll every POLL where there is none), in real time.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from crw.bus.dirwatch import DirWatch
from crw.bus.inbox import Report, read_reports, take_reply, write_report
from crw.cli.output import emit
from crw.cli.shell import shell_word
from crw.clock import system_clock
from crw.engine.held_fix import SPAWN_FAILED, answer_choices, held_fix
from crw.engine.run.locks import run_is_live
from crw.engine.run.rundir import RunDir, find_run, resolve_state
from crw.engine.run.runspec import RunSpec, read_run_spec
from crw.errors import InputError, RefusedError
from crw.journal.log import decode
from crw.journal.replay import RunState
from crw.journal.snapshot import replay_journal
from crw.journal.stores import store_at

DEFAULT_WAIT = 120.0
POLL = 0.02
"""Seconds between two looks for the reply where replies/ cannot be watched."""
LIVE_EVERY = 0.5
"""Seconds between two looks at whether a process still holds the run (with a
watch: the longest it sleeps without looking for the reply too)."""

NOT_HELD = "no process holds the run; it answers when it reaches the step"

_CALL = re.compile(r"(?P<node>.+)\.[1-9][0-9]*")
"""A call id: `<node>.<n>` (crw.engine.calls.gate.call_id)."""


def dispatched_command(
    run: str,
    call: str,
    *,
    agent: str | None,
    k: int,
    attempt: int,
    wait: float,
    state: str | None,
    json: bool,
    failed: str | None = None,
) -> int:
    _check_input(agent, failed, k, attempt, wait)
    run_dir = find_run(resolve_state(state, os.environ, Path.cwd()), run)
    spec = read_run_spec(run_dir.run_json)
    rows = _run_state(run_dir)
    _check_call(spec, rows, call)
    report = Report.new(run_dir.id, call, k, attempt, agent, system_clock(), failed)
    if rows.state == "ended":
        reply = _answer(report, _ended(rows, agent or "the subagent"))
        emit(json, reply, reply_line(reply))
        return 1
    if failed is not None:  # the call's own rows: the whole journal, once in a run's life
        journal = decode(_journal_bytes(run_dir), run_dir.journal).rows
        _check_failed(run_dir, [r for r in journal if r.get("call") == call], report)
    try:
        write_report(run_dir, report)
    except (OSError, ValueError) as err:
        reason = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
        raise RefusedError(
            f"cannot write the dispatch report into {run_dir.inbox}: {reason}; "
            "make the run directory writable"
        ) from err
    reply = await_reply(run_dir, report, wait)
    if reply["reply"] == "held":
        reply["fix"] = held_fix(SPAWN_FAILED, _answers(run_dir.id, call, state, rows.backend))
    emit(json, reply, reply_line(reply))
    return 0 if reply["reply"] in ("bound", "held") else 1


def _check_input(agent: str | None, failed: str | None, k: int, attempt: int, wait: float) -> None:
    if (agent is None) == (failed is None):
        raise InputError(
            "pass --agent with the agent_id spawn_agent answered (on multi-agent v2 the "
            "child's path the step's then command names), or --failed with the "
            "tool's output when the host refused the spawn (one of the two)"
        )
    if failed is not None and not failed.strip():
        raise InputError("--failed is empty; pass the output spawn_agent gave when it failed")
    if agent is not None and not agent:
        raise InputError("--agent is empty; pass the agent_id spawn_agent answered")
    if k < 1 or attempt < 1:
        raise InputError(f"--k {k} and --attempt {attempt} must be at least 1; copy the step's")
    if not wait >= 0:
        raise InputError(f"--wait {wait} is negative; pass seconds to wait, 0 for none")


def _check_call(spec: RunSpec, run: RunState, call: str) -> None:
    """Refuse a call that is not the run's: one its rows name is, else it must be
    `<node>.<n>` of a node of its workflow.

    Raises:
        InputError: the call is not the workflow's.
    """
    if call in run.calls:
        return
    # Imported here: the owner reports a call its rows name (the workflow's
    # parser and its schema checks are a fifth of the command's start).
    from crw.engine.config.workflow import load_workflow

    try:
        with spec.file_limit():
            workflow = load_workflow(Path(spec.workflow.path))
    except InputError:
        return  # the workflow cannot be read now: the run judges the report
    nodes = [node.id for node in workflow.nodes]
    match = _CALL.fullmatch(call)
    if match is None or match["node"] not in nodes:
        raise InputError(
            f'call "{call}" is not a call of run {spec.id} (its workflow {spec.workflow.path} '
            f"has the nodes {', '.join(nodes)}); copy CALL from the step crw flow next shows"
        )


def _check_failed(run: RunDir, call_rows: list[dict[str, Any]], report: Report) -> None:
    """Refuse a report of a failed spawn that would hold nothing: its step is not
    the one its call waits on, is no spawn, or one was reported failed already.

    Raises:
        RefusedError: the one line that says why and what to do instead.
    """
    from crw.engine.steps.replies import call_record, late_failed

    where = f"call {report.call} turn {report.k} attempt {report.attempt} of run {report.run}"
    record = call_record(call_rows)
    if not record.waits_on(report.attempt, report.k):
        raise RefusedError(f"{where}: {late_failed(report.k, report.attempt, record)}")
    step = [
        r
        for r in call_rows
        if r.get("row") == "step_published"
        and (r.get("k"), r.get("attempt")) == (report.k, report.attempt)
    ][-1]
    if step.get("action") == "send_input":
        raise RefusedError(
            f"{where} is a send_input to {step.get('agent_id')}, not a spawn: "
            "report what it dispatched with --agent"
        )
    waiting = [
        r
        for r in read_reports(run)
        if r.failed is not None
        and (r.call, r.k, r.attempt) == (report.call, report.k, report.attempt)
    ]
    if waiting:
        raise RefusedError(
            f"{where}: its failed spawn is reported already (inbox/{waiting[0].id}.json "
            "waits for the run): a failed spawn is reported once"
        )


def _answers(run_id: str, call: str, state: str | None, backend: str | None) -> dict[str, str]:
    """The command of each answer the held call takes, by choice."""
    tail = f" --state {shell_word(state)}" if state else ""
    return {
        choice: f"crw flow answer {run_id} {call} --{choice}{tail}"
        for choice in answer_choices(backend)
    }


def _ended(run: RunState, agent: str) -> dict[str, Any]:
    """The reply to a report on a run that has ended: nothing answers it."""
    return {
        "reply": "refused",
        "reason": (
            f"the run has ended ({run.ended_status}); close {agent} if it is still open, "
            "there is nothing more to report"
        ),
    }


@dataclass(frozen=True)
class Clock:
    """The clocks the wait goes by: `monotonic` for its deadline and its looks at
    whether the run is held, `sleep` between two looks without a watch. Tests pass
    one that stands still or whose sleep only moves the time on."""

    monotonic: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep


SYSTEM_CLOCK = Clock()


def await_reply(
    run: RunDir, report: Report, wait: float, clock: Clock = SYSTEM_CLOCK
) -> dict[str, Any]:
    """The run's reply to `report`, or `queued` when no process holds the run or
    it did not answer within `wait` seconds. Members: the report's id, run, call,
    k, attempt and agent_id, then the reply's own.

    It sleeps on a watch of replies/ (`crw.bus.dirwatch`), made before the first
    look, and reads the reply when its file is renamed in: at once, not at a
    poll. Without a watch (no inotify, no replies/) it looks every POLL."""
    watch = DirWatch.open(run.replies)
    try:
        return _await(run, report, wait, clock, watch)
    finally:
        if watch is not None:
            watch.close()


def _await(
    run: RunDir, report: Report, wait: float, clock: Clock, watch: DirWatch | None
) -> dict[str, Any]:
    name = f"{report.id}.json"
    deadline = clock.monotonic() + wait
    live_at = clock.monotonic()
    look = True
    while True:
        if look:
            reply = take_reply(run, report.id)
            if reply is not None:
                return _answer(report, reply)
        now = clock.monotonic()
        if now >= live_at:
            if not run_is_live(run):
                # The run may have answered and then let go: look once more.
                reply = take_reply(run, report.id)
                return _answer(report, reply or _unanswered(run, report))
            live_at = now + LIVE_EVERY
        if now >= deadline:
            return _answer(report, _queued(_timeout_reason(wait)))
        if watch is None:
            clock.sleep(min(POLL, max(deadline - now, 0.0)))
            continue
        # Until the reply arrives, or the next look at the run, or the deadline;
        # a wait that saw nothing (or lost events) looks too, in case the watch
        # was lost with its directory.
        arrived = watch.arrivals(max(min(live_at, deadline) - now, 0.0))
        look = not arrived or name in arrived


def _unanswered(run: RunDir, report: Report) -> dict[str, Any]:
    """The reply to a report no process holds the run for: queued, or refused when
    the run ended meanwhile (its replies are removed at the end: `clean_ended`)."""
    rows = _run_state(run)
    if rows.state == "ended":
        return _ended(rows, report.agent_id or "the subagent")
    return _queued(NOT_HELD)


def _queued(reason: str) -> dict[str, Any]:
    return {"reply": "queued", "reason": reason}


def _timeout_reason(wait: float) -> str:
    return f"the run did not answer within {wait:g} s; it answers when it reaches the step"


def _answer(report: Report, reply: dict[str, Any]) -> dict[str, Any]:
    head: dict[str, Any] = {
        "id": report.id,
        "run": report.run,
        "reply": None,
        "reason": None,
        "call": report.call,
        "k": report.k,
        "attempt": report.attempt,
        "agent_id": report.agent_id,
    }
    if report.failed is not None:
        head["failed"] = report.failed
    return head | reply


def reply_line(reply: dict[str, Any]) -> str:
    """The one line the human form prints for `reply`."""
    kind, reason = reply.get("reply"), reply.get("reason")
    call, attempt, agent = reply.get("call"), reply.get("attempt"), reply.get("agent_id")
    if kind == "bound":
        warnings = reply.get("warnings") or []
        flags = f" ({', '.join(map(str, warnings))})" if warnings else ""
        return f"bound: {call} attempt {attempt} is {agent}{flags}"
    if kind == "pair_mismatch":
        return f"pair_mismatch: close {agent} and spawn again with {_pair(reply.get('pair'))}"
    if kind == "close":
        # Imported here: the replies' rules (and the row models they read) are a
        # tenth of the command's start, and only a close names one of theirs.
        from crw.engine.steps.replies import ALREADY_ANSWERED

        if reason == ALREADY_ANSWERED:  # the run's own, done: no fault
            return (
                f"close: {agent} is {call}'s subagent, {reason} (nothing is wrong: every "
                "reply but bound exits 1)"
            )
        return f"close: close {agent}" + (f" ({reason})" if reason else "")
    if kind == "held":
        return f"held: {call} is held ({reason}); fix: {reply.get('fix')}"
    return f"{kind}: {reason}" if reason else str(kind)


def _pair(pair: Any) -> str:
    if not isinstance(pair, dict):
        return "the role's pair"
    parts = [
        f"{name}={pair[name]}"
        for name in ("agent_type", "model", "reasoning_effort")
        if pair.get(name) is not None
    ]
    return " ".join(parts) or "the role's pair"


def _run_state(run: RunDir) -> RunState:
    """The run's state from its replay snapshot and the rows after it (a report
    needs the calls' states, not their rows: a run of thousands of calls is not
    decoded whole at each report). Read quietly (as a live run's): a batch the
    run is writing this moment reads as a torn tail, which is no fault of the
    journal's (a corrupt one still refuses)."""
    return replay_journal(run.journal, live=True)[0]


def _journal_bytes(run: RunDir) -> bytes:
    try:
        return store_at(run.journal).read_from(0)
    except FileNotFoundError:
        return b""
