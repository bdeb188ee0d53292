"""The run process (`crw flow _run RUN`): holds the run and owns its nursery.

It puts the env its spec records into its own environment before it takes a lock
and puts back what was there when the run is done (the foreground resume runs it
in its own process), takes its process lock before the run lock (BIND-LINE-15),
refuses a mixed resume (the started row's backend is not run.json's), opens the
journal writer and commits its started row (backend, process, pid, role_pairs,
policy_digest), and a policy_repinned row after it when the role store reads other
pairs than the run's newest pins. It then connects to the run's host and runs the
workflow's calls on the backend run.json names (`crw.actors.backend`): the
app-server backend opens a thread per call (`app_server_run`); the session
backend publishes steps for the owner and binds the subagents it reports
(`session_run`, with the Inbox actor), with at most min(pool,
agents.max_threads - 1) calls in flight, agents.max_threads read again by every
process of the run.

A fault stops the process with one line (`crw.actors.faults`): a host it cannot
reach, or one that goes away mid-run, pauses the run (host_unavailable; the calls
in flight keep their rows and a resume goes on with them in place); a run file it
cannot write pauses it (write_failed, with the error and the file); a journal it
cannot append stops it with the line alone. Nothing is retried here: a paused
run waits for `crw flow resume`, or for its host (`crw.actors.host_back`).
"""

from __future__ import annotations

import contextlib
import functools
import gc
import logging
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import trio

from crw.actors import effect_proofs, faults, owner_line
from crw.actors.backend import Backend
from crw.actors.crash import crash_hook
from crw.actors.journal_writer import open_journal_writer
from crw.actors.run_end import end_run
from crw.clock import WallClock, system_clock
from crw.engine.calls.review import check_fix_efforts
from crw.engine.config.roles import RoleTable, load_roles, pin_rows
from crw.engine.config.workflow import Workflow, load_workflow
from crw.engine.run.launch_check import changed_workflow
from crw.engine.run.launch_record import LaunchFailure, clear_failure, record_failure, stamps
from crw.engine.run.locks import ProcessLock, hold_run
from crw.engine.run.run_inputs import task_inputs
from crw.engine.run.rundir import RunDir, find_run, resolve_state
from crw.engine.run.runspec import RunSpec, check_backend, read_run_spec, recorded_env
from crw.errors import CrwError, InputError, RefusedError
from crw.host.connect import connect_host
from crw.host.uri import parse_host_uri
from crw.journal.log import JournalRead, decode
from crw.journal.replay import RunState, replay
from crw.journal.rows import Paused, RowModel
from crw.journal.snapshot import save_snapshot
from crw.journal.stores import read_run_journal, store_at
from crw.journal.streamed import replay_packed
from crw.settings import Settings

log = logging.getLogger("crw.run")


def run_command(run: str, *, state: str | None) -> int:
    """Entry point of `crw flow _run`: exit 0 when the process ran its course.

    The cyclic garbage collector is off while the process starts up (`crw.cli.hot`
    turns it off before the imports): what the start-up makes (modules, classes, the
    workflow, the journal's history) lives as long as the process, and the
    collections its allocations start (some 100, one of them of every object) would
    walk it to free next to nothing. `_collect_from_here` lets it run again once
    the backend is about to run the calls."""
    gc.disable()
    threshold = gc.get_threshold()
    try:
        state_dir = resolve_state(state, os.environ, Path.cwd())
        run_dir = find_run(state_dir, run)
        spec = read_run_spec(run_dir.run_json)
        # Before any lock; put back when the run is done. Files as the start read them.
        with recorded_env(spec, os.environ), spec.file_limit():
            # The loop goes on while the journal syncs (`open_journal_writer`).
            entry = functools.partial(
                run_process, sync_in_thread=True, started_up=_collect_from_here
            )
            trio.run(entry, run_dir, spec, state_dir)
    finally:
        gc.enable()  # a start-up that stopped short (a foreground resume goes on)
        gc.set_threshold(*threshold)
    return 0


YOUNG_COLLECTION = 10_000
"""Tracked objects made (less those freed) between two collections of the youngest
generation while the run's calls run. With Python's 700, a 10,000-call session
run (bench/scale.py, tmpfs) collected its youngest generation 1,312-1,356 times,
the middle one 118-122 and every object it holds (rows, calls, tasks) 10 times:
0.77-0.84 s of its ~21 s of CPU, before its exit's collection. With 10,000: 35-41,
3-4 and none, 0.24 s. A collection of the youngest walks ~10,000 objects then
(~5 ms) where it walked 700; the garbage it leaves meanwhile is that many objects."""


def _collect_from_here() -> None:
    """The start-up is done: freeze what it made out of every later collection (its
    cyclic garbage, a few thousand objects, stays) and let the collector run on
    what the run makes from here, its youngest generation every YOUNG_COLLECTION
    objects."""
    gc.freeze()
    gc.set_threshold(YOUNG_COLLECTION, *gc.get_threshold()[1:])
    gc.enable()


def _nothing() -> None:
    pass


async def run_process(
    run_dir: RunDir,
    spec: RunSpec,
    state_dir: Path,
    *,
    clock: WallClock = system_clock,
    settings: Settings | None = None,
    sync_in_thread: bool = False,
    started_up: Callable[[], None] = _nothing,
) -> str:
    """Hold the run, record this process's started row, and run what can be run.

    Returns the run's state as the process leaves it (paused when its host went
    away). `settings` are the timers and limits run.json records, unless given.
    `sync_in_thread` syncs the journal in a worker thread (`open_journal_writer`;
    not under a MockClock, which a worker thread lets leap). `started_up` is
    called once the backend is connected and about to run the calls.

    Raises:
        RefusedError: a run file or the journal could not be written; its message
            is the one line naming the file, the error and the fix.
    """
    settings = settings if settings is not None else spec.run_settings()  # as the start recorded
    roles = load_roles(state_dir / "roles.toml")
    workflow = load_workflow(Path(spec.workflow.path))
    changed = changed_workflow(spec, workflow)
    if changed is not None:
        raise InputError(changed)
    check_fix_efforts(workflow, roles, state_dir / "roles.toml")  # a role store changed since
    inputs = task_inputs(spec, run_dir)  # from the run, never from a command line
    reused: list[Any] = []
    if spec.rerun is not None:  # a rerun's rows; its reuse rules load only for one
        from crw.engine.run.rerun import read_reused

        reused = read_reused(run_dir.reused, spec.id)
    with hold_run(run_dir) as lock:
        history = read_run_journal(run_dir.journal)  # decoded and replayed once a process
        past = replay(history.rows)
        check_backend(past, spec)  # a mixed resume launched by hand writes no row
        if past.ended_status is not None:  # a late launch: a run that ended gets no row
            raise RefusedError(
                f"run {spec.id} has ended ({past.ended_status}); its process writes nothing"
            )
        try:
            outcome = await _journaled(
                run_dir,
                spec,
                roles,
                workflow,
                settings,
                clock,
                lock,
                (history, past),
                state_dir,
                sync_in_thread,
                started_up,
                inputs,
                reused,
            )
        except BaseException as exc:
            fault = faults.classify(exc, spec.id, run_dir.journal)
            if fault is None:
                _record_stop(run_dir, state_dir, history, exc)
                faults.raise_root(exc)
            outcome = fault
        if outcome == "ended":  # the ended row is durable: the writer has closed
            # CloseOrchestrator while the process holds the run, the bus cleaned,
            # and what it holds in the checkout released (worktrees, branches
            # holding commits stay; evidence records), as every end of a run does.
            records = workflow.evidence_cwd is not None
            end = functools.partial(end_run, run_dir, state_dir, spec, records=records)
            await trio.to_thread.run_sync(end)
        # The run's own state goes before the snapshot's replay builds its own, so
        # the process's peak is the larger of the two, not their sum.
        del roles, workflow, history, past
        _keep_snapshot(run_dir)
        if not isinstance(outcome, str) and outcome.reason == "host_unavailable":
            # Said while the run is held: whoever waits for the process lock file to
            # go (the owner, a test) then finds the process's log complete.
            log.warning("%s", outcome.line)
    if isinstance(outcome, str):
        return outcome
    if outcome.reason == "host_unavailable":
        return "paused"
    raise RefusedError(outcome.line)


def _appended(journal: Path, history: JournalRead) -> list[dict[str, Any]]:
    """The rows committed after `history` (the writer cut any torn tail at its end)."""
    data = store_at(journal).read_from(history.end)
    return decode(data, journal, after=history.last_seq).rows


def _record_stop(
    run_dir: RunDir, state_dir: Path, history: JournalRead, exc: BaseException
) -> None:
    """Keep why this process stops on an error after its started row that no row
    records (a defect; a refusal such as a ref lock that stays taken), as the
    launcher keeps a launch that stopped before it (`launch_record`): `next` then
    launches no process for the run again until a file it could have stopped on
    changes or a resume is asked for, where it would launch one a poll, each
    stopping the same way; `status` and `next` say the line. Nothing is kept for
    an interrupt or a cancel, nor before the started row (the launcher's)."""
    leaves = faults.root_causes(exc)
    if not all(isinstance(leaf, Exception) for leaf in leaves):
        return
    pid = os.getpid()
    with contextlib.suppress(CrwError, OSError, ValueError):  # best effort: the error goes on up
        appended = _appended(run_dir.journal, history)
        if not any(row.get("row") == "started" and row.get("pid") == pid for row in appended):
            return
        leaf = leaves[0]
        reason = (
            str(leaf)
            if isinstance(leaf, CrwError)
            else f"{type(leaf).__name__}: {(str(leaf).splitlines() or [''])[0]} (see {run_dir.log})"
        )
        files = stamps(run_dir, state_dir)
        record_failure(run_dir, LaunchFailure(pid, reason, system_clock(), files, started=True))


COLLECT_BEFORE_SNAPSHOT = 8 << 20
"""Journal bytes from which the exit collects before its snapshot's replay (some
3,000 calls): below, what the run left in cycles is too little to matter."""


def _keep_snapshot(run_dir: RunDir) -> None:
    """Leave the replay snapshot of the journal as this process leaves it, so the
    owner's next `status` or `next` reads only what later processes append. The
    journal is replayed a piece at a time: decoded whole, a big run's rows would be
    the process's peak memory. What the run left in cycles (its tasks, their
    exceptions) is collected first when the journal is big, so the replay reuses
    its memory (a small run's exit makes no collection)."""
    size = 0
    with contextlib.suppress(CrwError, OSError):  # the store's: a database run's file is empty
        size = store_at(run_dir.journal).size()
    if size >= COLLECT_BEFORE_SNAPSHOT:
        gc.collect()
    with contextlib.suppress(CrwError, OSError):  # else the commands read it whole
        replayed = replay_packed(run_dir.journal, size)  # no result, calls packed
        save_snapshot(run_dir.journal, replayed.state, replayed.end, replayed.crc)


async def _journaled(
    run_dir: RunDir,
    spec: RunSpec,
    roles: RoleTable,
    workflow: Workflow,
    settings: Settings,
    clock: WallClock,
    process_lock: ProcessLock | None,
    past: tuple[JournalRead, RunState],
    state_dir: Path,
    sync_in_thread: bool,
    started_up: Callable[[], None] = _nothing,
    inputs: dict[str, Any] | None = None,
    reused: Sequence[RowModel] = (),
) -> str | faults.Fault:
    """Record the started row and run; a fault the journal can still record is
    recorded (paused) and returned. Raises what it cannot record. `past` is the
    journal as the process found it, and its replay (folded on with the started
    row: the journal is decoded once). `reused`: a rerun's reused rows, committed
    in one batch after the first started row that finds none in the journal."""
    hook = crash_hook(os.environ)
    async with open_journal_writer(
        run_dir.journal,
        clock=clock,
        after_commit=hook,
        known=past[0],
        sync_in_thread=sync_in_thread,
    ) as journal:
        history, replayed = past
        if spec.backend == "session":  # before the started row: `next` hands steps out after it
            await _retract_torn(run_dir, replayed, history.rows)
        await journal.commit(
            pin_rows(  # the pins, and their change since the earlier process's
                roles,
                replayed.role_pairs,
                replayed.policy_digest,
                backend=spec.backend,
                process=process_lock.token if process_lock else None,
                pid=os.getpid(),
                inputs=spec.inputs,
                multi_agent=_multi_agent(spec, replayed),
            )
        )
        clear_failure(run_dir)  # this launch did not fail: `status` says no earlier one
        if reused and not any(row.get("row") == "reused" for row in history.rows):
            await journal.commit(list(reused))  # before any call: the gate takes them
        started = _appended(run_dir.journal, history)
        rows = history.rows + started
        replay(started, into=replayed)
        settled = await effect_proofs.settle(  # before any call goes on
            journal, rows, run=spec.id, repository=spec.repository, now=clock()
        )
        rows += settled
        replay(settled, into=replayed)
        await owner_line.bind_started(state_dir, spec.owner, spec.id, started[0])
        # The host's reader (its client, protocol and the bind's markers) after the
        # started row, which `crw flow start` waits for.
        from crw.actors.host_reader import open_host_reader
        from crw.actors.thread_watches import followed

        follows = followed(spec.backend)

        try:
            async with (
                connect_host(
                    parse_host_uri(spec.host or "codex"),
                    codex_bin=spec.codex_bin,
                    stderr=run_dir.root / "host.log",
                    follows=follows,  # the host sends the run none of the others
                ) as client,
                open_host_reader(client, settings, follows=follows) as reader,
            ):
                token = process_lock.token if process_lock else None
                run = Backend(
                    journal,
                    reader,
                    workflow,
                    run_dir,
                    spec,
                    roles,
                    settings,
                    clock,
                    token,
                    started_up,
                    inputs or {},
                )
                if spec.backend == "session":
                    return await run.session(rows, replayed)
                return await run.app_server(rows, replayed)
        except BaseException as exc:
            fault = faults.classify(exc, spec.id, run_dir.journal)
            if fault is None or not fault.pauses:
                raise
            await journal.commit([Paused(reason=fault.reason, error=fault.error, file=fault.file)])
            return fault


def _multi_agent(spec: RunSpec, replayed: RunState) -> str | None:
    """A session run's protocol for its started row: the journal's, else run.json's
    (`crw.engine.owner.multi_agent.resumed_protocol`); None for an app-server run."""
    if spec.backend != "session":
        return None
    from crw.engine.owner.multi_agent import resumed_protocol

    return resumed_protocol(replayed.multi_agent, replayed.processes, spec.multi_agent)


async def _retract_torn(run_dir: RunDir, replayed: RunState, rows: list[dict[str, Any]]) -> None:
    """The step file of each step bound to no subagent whose packet a power loss
    took or tore, retracted (`crw.engine.steps.unbound`): its call writes both
    again from its row, or binds what the owner took before the loss."""
    from crw.bus.steps import retract_torn
    from crw.engine.steps.unbound import unbound_spawns

    published = unbound_spawns(replayed.calls, rows)
    if published:
        retracted = await trio.to_thread.run_sync(retract_torn, run_dir, published)
        if retracted:
            log.info("retracted steps whose packets are not whole: %s", ", ".join(retracted))
