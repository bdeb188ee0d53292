"""`crw flow call RUN CALL`: one call of a run, whole (`crw.engine.views.call_detail`).

It reads the run directory only, never a lock it would hold and never a row: the
call's state from the replay snapshot (`replay_journal`, as `status`), then the
call's own rows (`crw.journal.call_rows`: a byte search of the journal, only the
lines that name the call parsed), its packet files, the schema, and on a git
workspace the files its crw.commit changed. `--transcript` asks the run's host
for the turn's items (`thread/read`); a host that cannot give them is one line.
A call the run does not have is one line naming the run's calls (exit 2).
"""

from __future__ import annotations

import os
import shlex
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

from crw.cli.output import say_json
from crw.cli.read.run_spec import spec_json
from crw.engine.run.locks import is_held
from crw.engine.run.rundir import RunDir, find_run, resolve_state
from crw.engine.views.call_detail import CallDetail, call_detail
from crw.engine.views.call_turns import TurnView
from crw.engine.views.counts import reviews
from crw.errors import InputError, RefusedError
from crw.journal.call_rows import call_rows
from crw.journal.log import JournalCorruptError
from crw.journal.replay import RunState, replay
from crw.journal.snapshot import replay_journal

REVIEW_ROLES = frozenset({"reviewer", "critic"})
CALLS_NAMED = 10
"""The most calls the error of an unknown call names."""


def call_command(
    run: str,
    call: str,
    *,
    state: str | None,
    json: bool,
    answer_only: bool = False,
    transcript: bool = False,
) -> int:
    run_dir = find_run(resolve_state(state, os.environ, Path.cwd()), run)
    live = is_held(run_dir.run_lock)
    try:
        run_state, read = replay_journal(run_dir.journal, live=live)
    except JournalCorruptError as err:
        raise RefusedError(f"{err.damage}; {err.FIX}") from None
    state_ref = shlex.quote(state) if state is not None else ""
    if not _has_call(run_state, call):
        raise InputError(_no_such_call(run_dir, call, run_state, state_ref))
    detail = read_call(run_dir, run_state, read.end, call, state_ref=state_ref)
    if transcript:
        from crw.cli.read.call_transcript import transcript as asked

        host = spec_json(run_dir).get("host")
        turn = newest_turn(detail)
        text = asked(
            host if isinstance(host, str) else None,
            turn.thread_id if turn is not None else None,
            turn.turn_id if turn is not None else None,
        )
        detail = replace(detail, transcript=text)
    if answer_only:
        return _answer_only(detail, json, state_ref)
    if json:
        say_json(detail.to_json())
    else:
        from crw.cli.read.call_text import show

        show(detail)
    return 0


def read_call(
    run_dir: RunDir, run: RunState, end: int, call: str, *, state_ref: str = ""
) -> CallDetail:
    """The view of `call` (which `run`, the replay of the journal's first `end`
    bytes, names): its rows, packets, schema and, on git, changed files read; no
    transcript. `state_ref`: the --state the answer commands name (empty: none)."""
    from crw.cli.read import call_sources

    rows = call_rows(run_dir.journal, call, end)
    # The call's state is its rows' replay (no run row moves a call): the replay
    # snapshot's 10,000 settled calls are not built, and its result is there.
    state = replay(rows).calls[call]
    spec = spec_json(run_dir)
    prepared = next((row for row in rows if row.get("row") == "prepared"), {})
    judged = prepared.get("review")
    if judged is None and state.verdict is not None and state.role in REVIEW_ROLES:
        judged = reviews(run.calls.values()).get(call)  # a journal from before `review`
    paths = [r["packet"] for r in rows if isinstance(r.get("packet"), str)]
    commit = next((r.get("commit") for r in rows if r.get("row") == "crw_commit"), None)
    changed = None
    if isinstance(commit, str):
        repository = spec.get("repository")
        where = repository if isinstance(repository, str) else None
        changed = call_sources.changed_files(where, commit)
    return call_detail(
        run_dir.id,
        state,
        rows,
        backend=run.backend,
        run_ended=run.state == "ended",
        state_ref=state_ref,
        judged=judged,
        packets=call_sources.packets(paths),
        schema=call_sources.schema_of(spec, state.node, bool(judged or prepared.get("review"))),
        changed=changed,
        now=datetime.now(UTC),
    )


def newest_turn(detail: CallDetail) -> TurnView | None:
    """The call's newest turn, whose transcript `--transcript` asks the host for."""
    return next((t for a in reversed(detail.attempts) for t in reversed(a.turns)), None)


def _has_call(run: RunState, call: str) -> bool:
    """Whether the run's rows name `call`, its settled calls left unbuilt."""
    deferred = run.deferred_calls()
    if deferred is None:
        return call in run.calls
    return call in deferred.open or call in deferred.settled


def _answer_only(detail: CallDetail, json: bool, state_ref: str) -> int:
    """Print the call's answer alone (JSON, indented for a person; one line with
    `json`); exit 1 when it has none, saying why as `crw flow result --call` does."""
    import json as json_module

    from crw.cli.output import emit

    if detail.answer is not None:
        result = detail.answer.result
        emit(
            json,
            {"result": result},
            lambda: json_module.dumps(result, indent=2, ensure_ascii=False),
        )
        return 0
    why = f"{detail.state} ({detail.reason})" if detail.reason else detail.state
    error = f"call {detail.call} of run {detail.run} has no answer: it is {why}"
    flag = f" --state {state_ref}" if state_ref else ""
    fix = f"see why with: crw flow call {detail.run} {detail.call}{flag}"
    payload = {"run": detail.run, "call": detail.call, "state": detail.state, "error": error}
    emit(json, payload | {"fix": fix}, f"{error}; {fix}")
    return 1


def _no_such_call(run_dir: RunDir, call: str, run: RunState, state_ref: str) -> str:
    import json as json_module

    names = list(run.calls)
    listed = ", ".join(names[:CALLS_NAMED]) or "none yet"
    more = f" and {len(names) - CALLS_NAMED} more" if len(names) > CALLS_NAMED else ""
    flag = f" --state {state_ref}" if state_ref else ""
    return (
        f"run {run_dir.id} has no call {json_module.dumps(call)} (its calls: {listed}{more}); "
        f"name one as crw flow status {run_dir.id}{flag} lists them"
    )
