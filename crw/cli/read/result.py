"""`crw flow result RUN [--call C] [--json]`: the final answers of a run, for scripts.

It reads the run directory only: the whole journal, a piece at a time (the replay
snapshot keeps no answer), folded into the run's state. An ended run's answers
are its nodes' (`crw.engine.views.run_outcome.node_answers`): each node that
completed, with the answer of the call that completed it (a reviewed node's, the
answer its accepting review judged); a node that did not, its end. It exits as
`crw flow wait` would with no time to wait: 0 completed, 1 failed or aborted,
5 cancelled; a run not ended says so in one line, exit 3 waiting for a decision,
4 paused, 124 still going (or its process gone).

`--call C`: that call's answer alone, whatever the run's state (a completed call
is never run again), exit 0; a call with no answer (held, null_model, still
running, …) one line saying why, exit 1.
"""

from __future__ import annotations

import json as json_module
import os
import shlex
from pathlib import Path
from typing import Any

from crw.cli.output import emit
from crw.cli.read.follow import JournalTail
from crw.engine.run.locks import is_launching, run_is_live
from crw.engine.run.rundir import RunDir, find_run, resolve_state
from crw.engine.views.run_outcome import exit_code, node_answers, settled
from crw.errors import InputError
from crw.journal.log import JournalCorruptError
from crw.journal.replay import RunState


def result_command(run: str, *, call: str | None, state: str | None, json: bool) -> int:
    run_dir = find_run(resolve_state(state, os.environ, Path.cwd()), run)
    more = f" --state {shlex.quote(state)}" if state else ""
    live = run_is_live(run_dir) or is_launching(run_dir)
    tail = JournalTail(run_dir.journal)
    try:
        for _ in tail.pieces():  # each piece folded and let go: the state keeps the answers
            pass
    except JournalCorruptError as err:
        payload: dict[str, Any] = {
            "run": run_dir.id,
            "error": err.damage,
            "fix": err.FIX,
            "corrupt": err.report(),
        }
        emit(json, payload, f"run {run_dir.id}: {err.damage}\n{err.FIX}")
        return 1
    if call is not None:
        return _call_answer(run_dir, tail.state, call, more, json)
    outcome = settled(tail.state, live)
    if outcome is None or tail.state.state != "ended":
        return _not_ended(run_dir, tail.state, outcome, more, json)
    answers = node_answers(tail.state)
    payload = {
        "run": run_dir.id,
        "outcome": outcome,
        "exit": exit_code(outcome),
        "answers": {one.node: one.answer for one in answers if one.call is not None},
        "nodes": [{"node": one.node, "end": one.end, "call": one.call} for one in answers],
    }
    answered = sum(one.call is not None for one in answers)
    lines = [f"run {run_dir.id} ended {outcome}: {answered} of {len(answers)} nodes answered"]
    for one in answers:
        if one.call is None:
            lines.append(f"{one.node}: {one.end}, no answer")
        else:
            lines.append(f"{one.node} ({one.call}):")
            lines += ["  " + line for line in _answer_text(one.answer).splitlines()]
    emit(json, payload, "\n".join(lines))
    return exit_code(outcome)


def _answer_text(answer: Any) -> str:
    return json_module.dumps(answer, indent=2, ensure_ascii=False)


def _call_answer(run_dir: RunDir, run: RunState, call: str, more: str, json: bool) -> int:
    found = run.calls.get(call)
    if found is None:
        calls = ", ".join(list(run.calls)[:10]) or "none yet"
        raise InputError(
            f"run {run_dir.id} has no call {json_module.dumps(call)} (its calls: {calls}); "
            f"name one as crw flow status {run_dir.id}{more} lists them"
        )
    if found.state == "completed":
        payload = {"run": run_dir.id, "call": call, "node": found.node, "answer": found.result}
        emit(json, payload, _answer_text(found.result))
        return 0
    why = f"{found.state} ({found.reason})" if found.reason else found.state
    error = f"call {call} of run {run_dir.id} has no answer: it is {why}"
    fix = f"see why with: crw flow status {run_dir.id}{more}"
    payload = {"run": run_dir.id, "call": call, "state": found.state, "error": error, "fix": fix}
    emit(json, payload, f"{error}; {fix}")
    return 1


def _not_ended(run_dir: RunDir, run: RunState, outcome: str | None, more: str, json: bool) -> int:
    """One line: the run has no final answers yet, and what goes on from here. Exit
    3 waiting for a decision, 4 paused, else 124 (as `wait`'s time run out)."""
    error = f"run {run_dir.id} has not ended ({run.state}): it has no final answers yet"
    if outcome is None:
        fix = f"wait for them with: crw flow wait {run_dir.id}{more}"
    else:
        fix = f"see what it waits for with: crw flow status {run_dir.id}{more}"
    code = exit_code(outcome or "timeout")
    payload = {
        "run": run_dir.id,
        "outcome": outcome or "not_ended",
        "exit": code,
        "state": run.state,
        "error": error,
        "fix": fix,
    }
    emit(json, payload, f"{error}; {fix}")
    return code
