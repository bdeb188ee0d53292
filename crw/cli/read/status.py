"""`crw flow status RUN`: the run's outcome and each call's, read through replay.

It reads the run directory only (CMD-START-1, CMD-START-2): run.json and the
journal, never a lock it would hold and never a row. A corrupt journal (damage
that is not a torn tail, `crw.journal.log`) shows the run as `corrupt`: where the
damage is and what to do, and the calls as the rows before the damage leave them.
`--results` reads the whole journal (the replay snapshot keeps no answer), a
piece at a time.
"""

from __future__ import annotations

import logging
import os
import shlex
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from crw.cli.output import emit
from crw.cli.read.remote_run import Elsewhere, find_here_or_elsewhere
from crw.cli.read.run_spec import spec_json, start_again, workflow_file, workflow_plan
from crw.cli.read.status_text import human, todo
from crw.engine.held_fix import held_entry, with_fix
from crw.engine.run.host_wait import waiting
from crw.engine.run.launch_record import read_failure
from crw.engine.run.locks import holder_pid, is_held
from crw.engine.run.rundir import RunDir, resolve_state
from crw.engine.views.counts import counts, reviews, shown_state
from crw.engine.views.run_view import outcome, seconds_between
from crw.journal.log import JournalCorruptError
from crw.journal.replay import CallState, RunState, replay
from crw.journal.snapshot import replay_journal

log = logging.getLogger("crw.journal")


def status_command(
    run: str,
    *,
    state: str | None,
    json: bool,
    all_calls: bool = False,
    results: bool = False,
) -> int:
    run_dir, elsewhere = find_here_or_elsewhere(resolve_state(state, os.environ, Path.cwd()), run)
    state_ref = shlex.quote(state) if state is not None else ""
    payload = run_status(run_dir, state_ref, results=results, elsewhere=elsewhere)
    emit(json, payload, lambda: human(payload, all_calls=all_calls))
    return 0


def run_status(
    run_dir: RunDir, state_ref: str, *, results: bool = False, elsewhere: Elsewhere | None = None
) -> dict[str, Any]:
    """What `crw flow status --json` prints of `run_dir` (`status_payload` and what
    the command adds); `state_ref` is the --state its commands pass (empty: none).
    Read through the replay snapshot unless `results`. `elsewhere`: a run only the
    database keeps (its directory is on another machine), live while that
    machine's writer holds its lease."""
    if elsewhere is None:
        # The start lock first: the run's process lets it go once it holds the run lock.
        starting = is_held(run_dir.start_lock)
        live = is_held(run_dir.run_lock)
    else:
        starting, live = False, elsewhere.live()
    run_state, corrupt = _read(run_dir, live=live, results=results)
    if corrupt is not None:
        run_state.state = "corrupt"
    spec = spec_json(run_dir) if elsewhere is None else elsewhere.spec
    plan = {} if run_state.state == "ended" else workflow_plan(workflow_file(spec))
    payload = status_payload(
        run_dir.root.name, run_state, state_ref, results=results, plan=plan, live=live or starting
    )
    payload["run_dir"] = str(run_dir.root) if elsewhere is None else None
    payload["elsewhere"] = elsewhere.to_json() if elsewhere is not None else None
    payload["live"] = live
    payload["holder_pid"] = holder_pid(run_dir.run_lock) if live and not elsewhere else None
    payload["corrupt"] = corrupt
    payload["inputs"] = spec.get("inputs") or None
    payload["rerun"] = spec.get("rerun") or None
    waiter = waiting(run_dir) if run_state.state == "paused" and not live else None
    payload["host_wait"] = waiter.to_json() if waiter is not None else None
    failure = None if live else read_failure(run_dir)
    payload["launch_failed"] = failure.to_json() if failure is not None else None
    again = start_again(spec, state_ref)
    payload["todo"] = todo(payload, state_ref, again, _closes_left(run_dir))
    return payload


def _read(run_dir: RunDir, *, live: bool, results: bool) -> tuple[RunState, dict[str, Any] | None]:
    """The run's state: through the replay snapshot, or with `results` from the
    whole journal (a torn tail warned about unless the run is `live`); and the
    report of a corrupt journal's damage (the state the rows before it leave)."""
    if not results:
        try:
            return replay_journal(run_dir.journal, live=live)[0], None
        except JournalCorruptError as err:
            return replay(err.intact.rows), err.report()
    # Read a piece at a time, each replayed and let go: the state keeps the
    # results, not every row's text. Only --results needs the follower's reader.
    from crw.cli.read.follow import JournalTail

    tail = JournalTail(run_dir.journal)
    try:
        for _ in tail.pieces():
            pass
    except JournalCorruptError as err:
        return replay(err.intact.rows, into=tail.state), err.report()
    if tail.torn is not None and not live:
        log.warning("%s", tail.torn.message)
    return tail.state, None


def _closes_left(run_dir: RunDir) -> bool:
    """Whether close steps wait in steps/ for the owner."""
    try:
        return any(run_dir.steps.glob("*/close-*.json"))
    except OSError:
        return False


def status_payload(
    run_id: str,
    run: RunState,
    state_ref: str = "",
    *,
    results: bool = False,
    plan: dict[str, int] | None = None,
    live: bool = True,
) -> dict[str, Any]:
    """The `--json` object: run, state (`crashed` when no process holds a run
    that needs one, `counts.shown_state`), rows_state (the state as the rows
    leave it), backend, processes, ended_status, paused
    ({reason, error, file} of a paused run, else null), outcome ({state, reason,
    unfinished, held}: `crw.engine.views.run_view.Outcome`), started_at, last_at,
    progress ({done, total, in_flight, held, nodes}: `crw.engine.views.counts`,
    over the calls listed and what the workflow's `plan` still needs; `live`:
    whether a process holds the run), calls [{call, node, role, state, attempts,
    turns, tokens, started_at, ended_at, seconds, reason, errors (a null_model
    call's), review ({of, verdict, findings}: a review call's verdict and how
    many findings it names, once it answered), and for a held call of a run
    not ended its answer: the command of each answer (a held call of an ended run
    takes none: `crw flow answer` refuses it); with `results` its result}], tokens. `state_ref`
    is the --state those commands pass (empty: none). The command adds run_dir,
    live (whether a process holds the run lock), holder_pid (that process's pid, or
    null), inputs (null, or the run's inputs as run.json records them), rerun
    (null, or a rerun's {run, node}: its source run and the node it ran afresh
    from; each call it took from the source has reused, `<run>/<call>`),
    corrupt (null, or {journal, offset, valid_at, reason, damage, fix} when
    the state is `corrupt`; valid_at null when no whole rows follow the damage),
    launch_failed (null, or {pid, reason, at, started} of the last launch whose
    process stopped before its started row, or after it on an error no row records
    (started true), while no process holds the run), host_wait
    (null, or {pid, until} of the process that waits for the host of a run paused
    host_unavailable, to go on with it when it answers: `crw.actors.host_back`) and todo
    ([{do, command}]: what to do next)."""
    view = outcome(run)
    now = datetime.now(UTC)
    judged = reviews(run.calls.values())
    return {
        "run": run_id,
        "state": shown_state(run.state, live),
        "rows_state": run.state,
        "backend": run.backend,
        "processes": run.processes,
        "ended_status": run.ended_status,
        "paused": (
            {"reason": run.paused_reason, "error": run.paused_error, "file": run.paused_file}
            if run.state == "paused"
            else None
        ),
        "outcome": {
            "state": view.state,
            "reason": view.reason,
            "unfinished": view.unfinished,
            "held": view.held,
        },
        "started_at": run.started_at,
        "last_at": run.last_at,
        "progress": counts(run, plan, live=live).to_json(),
        "calls": [
            call_entry(call, now, run_id, state_ref, run, results, judged.get(call.call))
            for call in run.calls.values()
        ],
        "tokens": run.spent,
    }


def call_entry(
    call: CallState,
    now: datetime,
    run_id: str,
    state_ref: str,
    run: RunState,
    results: bool,
    judged: str | None,
) -> dict[str, Any]:
    """A call's entry, made from its state at once (10,000 in a big run's status:
    no `run_view.CallView` in between); `judged`: the call a review call judges."""
    entry: dict[str, Any] = {
        "call": call.call,
        "node": call.node,
        "role": call.role,
        "state": call.state,
        "attempts": call.attempt,
        "turns": call.turns,
        "tokens": call.tokens,
        "started_at": call.started_at,
        "ended_at": call.ended_at,
        "seconds": seconds_between(call.started_at, call.ended_at, now),
        "reason": call.reason,
    }
    if call.state == "held" and run.state != "ended":
        entry |= with_fix(
            held_entry(run_id, call.call, call.reason, state_ref, run.backend), call.error
        )
    if call.by:
        entry["by"] = call.by
    if call.reused:
        entry["reused"] = call.reused
    if call.errors is not None:
        entry["errors"] = call.errors
    if judged is not None and call.verdict is not None:
        entry["review"] = {"of": judged, "verdict": call.verdict, "findings": call.findings}
    if results:
        entry["result"] = call.result
    return entry
