"""`crw flow answer RUN CALL --retry|--skip|--abort|--restart [--no-resume] [--wait S] [--json]`.

The decision for a held call (`crw.engine.holds.decision`): a `decision` row appended to
the run's journal, then the run resumed (unless --no-resume; an abort ends the
run, so nothing resumes). A run whose process still runs other calls is drained
first: the command waits up to --wait seconds for that process to let the run
lock go, and takes it the moment it does. It holds the run lock from the end of
the process it drained until its row is stored, and the resume it starts takes
the lock after that (CMD-NEXT-27). The same answer given twice is said so and
appends nothing. An abort ends the run: the command then ends it as the run's
process does at its end (`crw.actors.run_end`): it closes the owner's
orchestrator line, cleans the bus and releases what the run holds in the
checkout; the same abort given again does it again (it finishes what a crash cut
short). A restart of an open call is refused at once while a
process holds the run: no drain ends a process that runs the call itself.

The resume waits for its process's started row: a process that stopped before it
(the workflow changed since the run started) is reported with its line, exit 1,
the answer recorded. --no-resume names what a resume would be refused for now
(`launch_check.resume_blocker`) rather than a resume that would be refused, and
the state line says so when no process holds a run that goes on.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import time
from pathlib import Path
from typing import Any

from crw.cli.output import emit
from crw.cli.read.run_spec import start_again
from crw.cli.run.resume import check_resumable, not_resumed
from crw.clock import system_clock
from crw.engine.holds.decision import (
    CHOICES,
    Already,
    Answer,
    Choice,
    Record,
    Refused,
    decide_answer,
)
from crw.engine.holds.supersede import node_of
from crw.engine.owner.next_state import RESUMABLE_STATES, open_calls
from crw.engine.run.launch_check import resume_blocker
from crw.engine.run.launch_record import LaunchFailure
from crw.engine.run.locks import RunHeldError, RunLock, holder_pid, run_is_live, run_lock
from crw.engine.run.rundir import RunDir, find_run, resolve_state
from crw.engine.run.runspec import RunSpec, check_backend, read_run_spec
from crw.engine.run.tmploc import recorded_problem
from crw.errors import InputError, RefusedError
from crw.journal.log import encode_batch, encode_body
from crw.journal.replay import RunState, replay
from crw.journal.stores import read_run_journal, store_at

DRAIN_POLL = 0.1
"""Seconds between two tries at the run lock while the run's process runs."""


def one_choice(*, retry: bool, skip: bool, abort: bool, restart: bool = False) -> Choice:
    """The one answer the flags give.

    Raises:
        InputError: none of them, or more than one.
    """
    flags: tuple[Choice, ...] = (*CHOICES, "restart")
    ons = (retry, skip, abort, restart)
    chosen = [choice for choice, on in zip(flags, ons, strict=True) if on]
    if len(chosen) != 1:
        raise InputError("answer takes exactly one of --retry, --skip, --abort, --restart")
    return chosen[0]


def answer_flags_command(
    run: str,
    call: str,
    *,
    retry: bool,
    skip: bool,
    abort: bool,
    restart: bool,
    no_resume: bool,
    wait: float,
    state: str | None,
    json: bool,
) -> int:
    """`answer` as its command line gives it (one flag a choice): what the command
    tree's `answer` and the hot path (`crw.cli.hot`) run."""
    choice = one_choice(retry=retry, skip=skip, abort=abort, restart=restart)
    return answer_command(
        run, call, choice=choice, resume=not no_resume, wait=wait, state=state, json=json
    )


def answer_command(
    run: str,
    call: str,
    *,
    choice: Choice,
    resume: bool,
    wait: float,
    state: str | None,
    json: bool,
) -> int:
    state_dir = resolve_state(state, os.environ, Path.cwd())
    run_dir = find_run(state_dir, run)
    spec = read_run_spec(run_dir.run_json)
    resumes = resume and choice != "abort"
    seq: int | None = None
    # Refuse at once what no drain changes; the same answer again drains nothing.
    again = start_again(spec.to_json(), shlex.quote(state) if state is not None else "")
    live = run_is_live(run_dir)
    if isinstance(_judge(run_dir, spec.id, call, choice, live=live, again=again), Record):
        if resumes:  # the resume it would start is refused before anything changes
            check_backend(replay(read_run_journal(run_dir.journal).rows), spec)
            _check_env(spec)
        with _drained(run_dir, spec.id, wait):
            verdict = _judge(run_dir, spec.id, call, choice, again=again)
            seq = append_row(run_dir, verdict.row) if isinstance(verdict, Record) else None
            if choice == "abort":  # the run ended: no process is there to end it
                _end_run(run_dir, state_dir, spec)
    elif choice == "abort":  # said again: it finishes the end a crash cut short
        with contextlib.suppress(RunHeldError), run_lock(run_dir):
            _end_run(run_dir, state_dir, spec)
    payload: dict[str, Any] = {
        "run": spec.id,
        "call": call,
        "choice": choice,
        "recorded": seq is not None,
        "seq": seq,
        "resumed_pid": None,
        "resume_refused": None,
    }
    said = (
        f"call {call} of run {spec.id}: answered {choice}"
        if seq is not None
        else f"call {call} of run {spec.id} was answered {choice} already; nothing appended"
    )
    if resumes and seq is not None:
        payload["resumed_pid"], how = _resume(run_dir, state_dir, spec, said)
        said += f"; {how}"
    after = replay(read_run_journal(run_dir.journal).rows)
    if seq is not None and not resumes and choice != "abort":
        blocker = resume_blocker(run_dir, spec, after)
        payload["resume_refused"] = blocker
        said += (
            f"; go on with: crw flow resume {spec.id} --detach"
            if blocker is None
            else f"; a resume is refused now: {blocker}; then go on with: "
            f"crw flow resume {spec.id} --detach"
        )
    payload["state"] = after.state
    if choice == "restart":  # the node's new call
        payload["by"] = after.calls[call].by
        said += f"; node {node_of(call)} runs again as {payload['by']}"
    emit(json, payload, f"{said} ({_state_note(run_dir, after)})")
    return 0


def _end_run(run_dir: RunDir, state_dir: Path, spec: RunSpec) -> None:
    """End an aborted run no process holds (`crw.actors.run_end`, imported here: the
    release of its workspaces reads the row models and takes the owner's file lock,
    which no other answer needs)."""
    from crw.actors.run_end import end_run

    end_run(run_dir, state_dir, spec)


def _state_note(run_dir: RunDir, after: RunState) -> str:
    """The run's state, or that no process holds a run that goes on."""
    if after.state in RESUMABLE_STATES and not run_is_live(run_dir):
        return "no process holds the run"
    return f"run {after.state}"


def _judge(
    run_dir: RunDir,
    run_id: str,
    call: str,
    choice: Choice,
    *,
    live: bool = False,
    again: str | None = None,
) -> Record | Already:
    rows = read_run_journal(run_dir.journal).rows
    mine = [row for row in rows if row.get("call") == call]
    verdict: Answer = decide_answer(
        replay(rows), mine, run_id, call, choice, live=live, again=again
    )
    if isinstance(verdict, Refused):
        raise RefusedError(verdict.line)
    return verdict


def _check_env(spec: RunSpec) -> None:
    """run_env_unusable: the resume would start below a recorded TMPDIR that is
    gone; refused before anything is appended or drained."""
    problem = recorded_problem(spec.env_overrides())
    if problem is not None:
        raise RefusedError(
            f"run_env_unusable: run {spec.id}: {problem}, then answer again; "
            "or answer with --no-resume"
        )


def _drained(run_dir: RunDir, run_id: str, wait: float) -> RunLock:
    """The run lock, taken the moment the run's process lets it go, within `wait`
    seconds; refused with the number of calls the process still runs."""
    deadline = time.monotonic() + wait
    while True:
        try:
            return run_lock(run_dir)
        except RunHeldError:
            if time.monotonic() >= deadline:
                break
            time.sleep(DRAIN_POLL)
    running = len(open_calls(replay(read_run_journal(run_dir.journal).rows)))
    pid = holder_pid(run_dir.run_lock)
    process = f"process {pid}" if pid else "process"
    raise RefusedError(
        f"run {run_id}'s {process} still runs {running} call{'s' if running != 1 else ''}; "
        f"answer again once it has ended (crw flow next {run_id} shows the run's state), "
        "or with a longer --wait"
    )


def append_row(run_dir: RunDir, row: Any) -> int:
    """Append `row` as one batch, durable before this returns; its seq."""
    journal = store_at(run_dir.journal).open_appender()
    try:
        seq = journal.last_seq + 1
        journal.append(encode_batch(seq, system_clock(), [encode_body(row)]), 1)
    finally:
        journal.close()
    return seq


def _resume(run_dir: RunDir, state_dir: Path, spec: RunSpec, said: str) -> tuple[int | None, str]:
    """Launch the run's process as `crw flow resume RUN --detach` does, and wait for
    its started row; a run another command resumed meanwhile (`next`) is left to
    that process.

    Raises:
        RefusedError: the process stopped before its started row (`said`, the
            answer recorded, then the process's line).
    """
    from crw.engine.run.launch import launch_once

    try:
        launch = launch_once(
            run_dir,
            state_dir,
            spec.env_overrides(),
            os.environ,
            lambda: check_resumable(run_dir, spec),
        )
    except RunHeldError:
        pid = holder_pid(run_dir.run_lock)
        return pid, f"another command resumed the run (process {pid})"
    came = launch.settle(spec.run_settings().start_wait)
    if isinstance(came, LaunchFailure):
        raise RefusedError(f"{said}; but {not_resumed(spec.id, came)}")
    if came == "coming_up":
        return launch.pid, f"run resumed in process {launch.pid}, still coming up"
    return launch.pid, f"run resumed in process {launch.pid}"
