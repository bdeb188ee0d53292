"""`crw flow pause RUN [--wait S] [--json]`, and what `crw flow cancel` shares with it.

A run a process holds gets a request in its inbox (`crw.bus.control`); the run
interrupts the running turns of its calls, holds each call, and answers with its
row (`paused`, or `cancelled` and `ended`), which the command waits for up to S
seconds (120), as `crw flow dispatched` waits for its reply. A run no process
holds is stopped under its launch lock, so no resume launches a process
meanwhile: with calls an earlier process left open, the command launches the
run's process detached, as `crw flow resume RUN --detach` does, and waits for
its answer; that process reads the request before any call goes on and stops
them the same way (the host is needed to interrupt their turns). With none, it
writes the run's row itself under the run lock, and a cancel that so ends the
run ends it as the run's process would (`crw.actors.run_end`: the owner's
orchestrator line closed, the bus cleaned, what the run holds in the checkout
released). The command never becomes the run's
process: it writes no `started` row and runs no call. A launch that races this
one (a resume, a `next`) is waited for instead: its process finds the request
in the inbox and answers it.

Idempotent: a pause of a paused run says so (exit 0); a pause or cancel of an
ended run refuses with one line (exit 1). Nothing is written before the checks.
"""

from __future__ import annotations

import os
import shlex
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from crw.actors.run_end import end_run
from crw.bus import control
from crw.cli.output import emit
from crw.cli.read.status_text import command
from crw.clock import system_clock
from crw.detach import Detached
from crw.engine.run.host_wait import stop_waiter
from crw.engine.run.launch import launch_run_process
from crw.engine.run.locks import RunHeldError, is_launching, launch_lock, run_is_live, run_lock
from crw.engine.run.rundir import RunDir, find_run, resolve_state
from crw.engine.run.runspec import RunSpec, read_run_spec
from crw.engine.run.tmploc import recorded_problem
from crw.errors import RefusedError
from crw.journal.log import decode
from crw.journal.replay import TERMINAL_ROWS, RunState, replay
from crw.journal.stores import store_at

DEFAULT_WAIT = 120.0
POLL = 0.05
"""Seconds between two reads of the journal for the run's answer."""

ANSWERS = {"pause": ("paused", "ended"), "cancel": ("ended",)}
"""The run rows that answer each request (a run that ended answers a pause)."""


@dataclass(frozen=True)
class Target:
    run_dir: RunDir
    spec: RunSpec
    state_dir: Path
    state_ref: str = ""
    """The --state the command was given (quoted), which its hints pass on; "" for none."""

    def command(self, verb: str, *extra: str) -> str:
        """`crw flow VERB RUN EXTRA --state S`: a hint's command, as the user types it."""
        return command(verb, self.spec.id, self.state_ref, *extra)


def pause_command(run: str, *, wait: float, state: str | None, json: bool) -> int:
    return control_command("pause", run, wait=wait, state=state, json=json)


def control_command(op: control.Op, run: str, *, wait: float, state: str | None, json: bool) -> int:
    """Pause or cancel `run`; prints what was done, returns the exit code."""
    state_dir = resolve_state(state, os.environ, Path.cwd())
    run_dir = find_run(state_dir, run)
    state_ref = shlex.quote(state) if state is not None else ""
    target = Target(run_dir, read_run_spec(run_dir.run_json), state_dir, state_ref)
    stop_waiter(run_dir)  # a run paused host_unavailable goes on by itself no more
    before = _read(run_dir)
    _refuse_ended(op, target, before)
    if op == "pause" and before.state == "paused" and not _coming(run_dir):
        return _print(op, target, before, before, json, via="none")
    request = control.Request.new(run_dir.id, op, system_clock())
    try:
        control.write_request(run_dir, request)
    except OSError as err:
        raise RefusedError(
            f"cannot write the {op} request into {run_dir.inbox}: {err.strerror or err}; "
            "make the run directory writable"
        ) from err
    after, via, pid = _stop(op, target, before, wait)
    return _print(op, target, before, after, json, via=via, pid=pid)


def _coming(run_dir: RunDir) -> bool:
    """Whether a process holds the run or is being launched for it (a waiter for
    the host told to stop may have launched one just before)."""
    return run_is_live(run_dir) or is_launching(run_dir)


def _refuse_ended(op: str, target: Target, run: RunState) -> None:
    if run.state == "ended":
        raise RefusedError(
            f"run {target.spec.id} has ended ({run.ended_status}); there is nothing to {op}; "
            f"see it with: {target.command('status')}"
        )


def _stop(
    op: control.Op, target: Target, before: RunState, wait: float
) -> tuple[RunState, str, int | None]:
    """Wait for the run's answer: from its live process, or from the process this
    command launches when none holds the run; or stop it here when it has no open
    call. Returns the run, who stopped it and the pid of the process launched."""
    deadline = time.monotonic() + wait
    launched: Detached | None = None
    while True:
        gone = launched is not None and launched.poll() is not None
        after = _read(target.run_dir)
        if after.last_seq > before.last_seq and after.state in ANSWERS[op]:
            _let_go(target.run_dir, deadline)
            return after, "process" if launched is None else "launched", _pid(launched)
        if time.monotonic() >= deadline:
            raise RefusedError(
                f"run {target.spec.id} did not answer the {op} within {wait:g} s; its request "
                f"waits in {target.run_dir.inbox} and the run acts on it when its calls reach "
                f"a wait: follow it with: {target.command('status')}"
            )
        if run_is_live(target.run_dir) or is_launching(target.run_dir):
            time.sleep(POLL)
            continue
        _refuse_ended(op, target, after)
        if launched is not None and gone:
            raise RefusedError(
                f"run {target.spec.id}'s process {launched.pid} exited before it answered the "
                f"{op}; see why in {target.run_dir.log}, then run the {op} again"
            )
        if launched is None:
            stopped = _stop_here(op, target, before)
            if isinstance(stopped, RunState):
                return stopped, "here", None
            launched = stopped
        time.sleep(POLL)


def _let_go(run_dir: RunDir, deadline: float) -> None:
    """Wait, up to `deadline`, for the process that answered to let go of the run
    (a paused or ended run's process exits after its row): a resume started once
    the command answered then resumes the run, not is refused as held by it."""
    while run_is_live(run_dir) and time.monotonic() < deadline:
        time.sleep(POLL)


def _pid(launched: Detached | None) -> int | None:
    return None if launched is None else launched.pid


def _stop_here(op: control.Op, target: Target, before: RunState) -> RunState | Detached | None:
    """Stop a run no process holds, under its launch lock: launch the run's process
    for its open calls (their turns are interrupted on the host; the child), else
    write its row alone (the run as it then reads). None when a process or another
    launch got there first, or the run answered meanwhile: wait for it."""
    problem = recorded_problem(target.spec.env_overrides())
    if problem is not None:
        raise RefusedError(
            f"run {target.spec.id}'s process cannot be launched to {op} it: {problem}, "
            f"then run the {op} again"
        )
    try:
        with launch_lock(target.run_dir) as lock:
            run = _read(target.run_dir)
            answered = run.last_seq > before.last_seq and run.state in ANSWERS[op]
            if answered or run_is_live(target.run_dir):
                return None
            _refuse_ended(op, target, run)
            if any(call.state not in TERMINAL_ROWS for call in run.calls.values()):
                return launch_run_process(
                    target.run_dir,
                    target.state_dir,
                    target.spec.env_overrides(),
                    os.environ,
                    lock,
                )
            with run_lock(target.run_dir):
                _write_rows(op, target, _read(target.run_dir))
                if op == "cancel":  # it ended the run: no process is there to end it
                    end_run(target.run_dir, target.state_dir, target.spec)  # rows durable
    except RunHeldError:
        return None
    return _read(target.run_dir)


def _write_rows(op: control.Op, target: Target, run: RunState) -> None:
    """The run's row for a run with no call to interrupt, then the request out."""
    import trio

    from crw.actors.journal_writer import open_journal_writer
    from crw.engine.config.workflow import load_workflow
    from crw.engine.holds import interrupt

    with target.spec.file_limit():
        nodes = [node.id for node in load_workflow(Path(target.spec.workflow.path)).nodes]
    finished = {c.node: c.state for c in run.calls.values() if c.node is not None}
    request = control.first_request(target.run_dir)
    reason = control.REASONS[op]
    rows = interrupt.run_rows(reason, request.id if request else None, nodes, finished)

    async def commit() -> None:
        async with open_journal_writer(target.run_dir.journal) as journal:
            await journal.commit(rows)

    trio.run(commit)
    control.remove_answered(target.run_dir, reason)


def _read(run_dir: RunDir) -> RunState:
    """The run as its journal reads now; a batch the live run is writing this
    moment reads as a torn tail, no fault of the journal's."""
    try:
        data = store_at(run_dir.journal).read_from(0)
    except FileNotFoundError:
        data = b""
    return replay(decode(data, run_dir.journal).rows)


def _print(
    op: str,
    target: Target,
    before: RunState,
    after: RunState,
    as_json: bool,
    *,
    via: str,
    pid: int | None = None,
) -> int:
    """What the command did, in one line or one JSON object; the exit code."""
    run_id = target.spec.id
    held = sorted(
        call.call
        for call in after.calls.values()
        if call.state == "held" and call.reason in ("paused", "cancelled")
    )
    stopped = after.state == "paused" if op == "pause" else after.ended_status == "cancelled"
    payload: dict[str, Any] = {
        "run": run_id,
        "op": op,
        "state": after.state,
        "ended_status": after.ended_status,
        "already": via == "none",
        "via": via,
        "held": held,
    }
    if pid is not None:
        payload["pid"] = pid
    if not stopped:
        payload["reason"] = after.paused_why or after.ended_status
        emit(as_json, payload, _unstopped(op, target, after))
        return 1
    emit(as_json, payload, _done(op, target, held, via))
    return 0


def _done(op: str, target: Target, held: list[str], via: str) -> str:
    """The line of a pause or cancel done. A pause names the detached resume: the
    foreground one runs the run in the terminal, silent until the run ends."""
    run_id, resume = target.spec.id, target.command("resume", "--detach")
    if via == "none":
        return f"run {run_id} is already paused; resume it with: {resume}"
    calls = f"; held: {', '.join(held)}" if held else ""
    if op == "pause":
        return f"run {run_id} paused{calls}; resume it with: {resume}"
    if target.spec.backend != "session":  # the run interrupted its own threads' turns
        return f"run {run_id} cancelled{calls}; see it with: {target.command('status')}"
    return (
        f"run {run_id} cancelled{calls}; the owner closes its subagents "
        f"(close steps in: {target.command('next')})"
    )


def _unstopped(op: str, target: Target, after: RunState) -> str:
    run_id, status = target.spec.id, target.command("status")
    if after.state == "ended":
        return (
            f"run {run_id} ended ({after.ended_status}) before the {op} reached it; "
            f"see it with: {status}"
        )
    return (
        f"run {run_id} did not {op}: it is {after.state} ({after.paused_why}); "
        f"see why with: {status}, then run the {op} again"
    )
