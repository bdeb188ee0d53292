"""`crw flow status RUN`: the run's state and each call's, read through replay.

It reads the run directory only (CMD-START-1, CMD-START-2): run.json and the
journal, never a lock it would hold and never a row. A corrupt journal (damage
with whole rows after it, `crw.journal.log`) shows the run as `corrupt`: where the
damage is and what to do, and the calls as the rows before the damage leave them.
"""

from __future__ import annotations

import os
import shlex
from collections import Counter
from pathlib import Path
from typing import Any

from crw.cli.output import emit, format_tokens
from crw.engine.held_fix import with_fix
from crw.engine.locks import holder_pid, is_held
from crw.engine.next_state import answer_choices
from crw.engine.rundir import find_run, resolve_state
from crw.journal.log import JournalCorruptError
from crw.journal.replay import RunState, replay
from crw.journal.snapshot import replay_journal

SUMMARY_OVER = 40
"""A run of more calls is summarised in the human form (--all lists them all)."""
SHOWN = 10
"""How many calls of each kind a summary lists: the last ones, and those not completed."""


def status_command(run: str, *, state: str | None, json: bool, all_calls: bool = False) -> int:
    run_dir = find_run(resolve_state(state, os.environ, Path.cwd()), run)
    corrupt: dict[str, Any] | None = None
    try:
        run_state, _ = replay_journal(run_dir.journal, live=is_held(run_dir.run_lock))
    except JournalCorruptError as err:
        run_state = replay(err.intact.rows)
        corrupt = {
            "journal": str(err.path),
            "offset": err.offset,
            "valid_at": err.valid_at,
            "reason": err.reason,
            "damage": err.damage,
            "fix": err.FIX,
        }
    if corrupt is not None:
        run_state.state = "corrupt"
    state_ref = shlex.quote(state) if state is not None else ""
    payload = status_payload(run_dir.root.name, run_state, state_ref)
    payload["run_dir"] = str(run_dir.root)
    payload["holder_pid"] = holder_pid(run_dir.run_lock) if is_held(run_dir.run_lock) else None
    payload["corrupt"] = corrupt
    emit(json, payload, lambda: _human(payload, run_state, all_calls=all_calls))
    return 0


def status_payload(run_id: str, run: RunState, state_ref: str = "") -> dict[str, Any]:
    """The `--json` object: run, state, backend, processes, ended_status, paused
    ({reason, error, file} of a paused run, else null), calls
    [{call, node, role, state, attempts, turns, tokens, and for a held call its
    reason and answer: the command of each answer}], tokens. `state_ref` is the --state
    those commands pass (empty: none). The command adds
    run_dir, holder_pid (the pid of the process holding the run lock, or null) and
    corrupt (null, or {journal, offset, valid_at, reason, damage, fix} when the
    state is `corrupt`)."""
    return {
        "run": run_id,
        "state": run.state,
        "backend": run.backend,
        "processes": run.processes,
        "ended_status": run.ended_status,
        "paused": (
            {"reason": run.paused_reason, "error": run.paused_error, "file": run.paused_file}
            if run.state == "paused"
            else None
        ),
        "calls": [
            {
                "call": call.call,
                "node": call.node,
                "role": call.role,
                "state": call.state,
                "attempts": call.attempt,
                "turns": call.turns,
                "tokens": call.tokens,
            }
            | (
                with_fix(_held(run_id, call.call, call.reason, state_ref, run.backend), call.error)
                if call.state == "held"
                else {}
            )
            | ({"by": call.by} if call.by else {})
            for call in run.calls.values()
        ],
        "tokens": run.spent,
    }


def _held(
    run_id: str, call: str, reason: str | None, state_ref: str, backend: str | None
) -> dict[str, Any]:
    """A held call's reason and the exact command of each answer (docs/decisions.md)."""
    state = f" --state {state_ref}" if state_ref else ""
    answer = {
        choice: f"crw flow answer {run_id} {call} --{choice}{state}"
        for choice in answer_choices(backend)
    }
    return {"reason": reason or "held", "answer": answer}


def _human(payload: dict[str, Any], run: RunState, *, all_calls: bool) -> str:
    head = f"run {payload['run']}: {run.state}"
    if run.backend:
        head += f" ({run.backend} backend, process {run.processes})"
    holder = payload.get("holder_pid")
    head += f"; held by pid {holder}" if holder else "; no process holds it"
    lines = [head]
    if run.state == "paused":
        lines.append(f"  paused: {run.paused_why}")
    corrupt = payload.get("corrupt")
    if corrupt:
        lines += [f"  {corrupt['damage']}", f"  {corrupt['fix']}"]
        lines.append("  the calls as the rows before the damage leave them:")
    calls = payload["calls"]
    if not calls:
        lines.append("  no calls yet")
    if all_calls or len(calls) <= SUMMARY_OVER:
        lines += [line for call in calls for line in _call_lines(call)]
    else:
        lines += _summary(calls, "run it again with --all")
    lines.append(f"  tokens: {format_tokens(run.spent)}")
    return "\n".join(lines)


def _call_line(call: dict[str, Any]) -> str:
    return (
        f"  {call['call']:<16} {call['role'] or '-':<12} {call['state']:<16} "
        f"attempts {call['attempts']}  turns {call['turns']}  "
        f"tokens {format_tokens(call['tokens'])}"
    )


def _call_lines(call: dict[str, Any]) -> list[str]:
    """The call's line, and for a held call its reason and the command that answers
    it; for a restarted one, the call that runs its node again."""
    if "by" in call:
        node = call["node"] or call["call"].rpartition(".")[0]
        return [_call_line(call), f"    restarted: node {node} runs again as {call['by']}"]
    if "answer" not in call:
        return [_call_line(call)]
    if "fix" in call:
        return [
            _call_line(call),
            f"    held ({call['reason']}): {call['error']}",
            f"    fix: {call['fix']}",
        ]
    others = ", ".join(f"--{choice}" for choice in call["answer"] if choice != "retry")
    answer = f"{call['answer']['retry']} (or {others})"
    return [_call_line(call), f"    held ({call['reason']}): answer with {answer}"]


def _summary(calls: list[dict[str, Any]], every: str) -> list[str]:
    """Counts by state, the calls not completed, and the last calls."""
    counts = Counter(call["state"] for call in calls)
    by_state = ", ".join(f"{state} {n:,}" for state, n in counts.most_common())
    lines = [f"  {len(calls):,} calls: {by_state}"]
    pending = [call for call in calls if call["state"] != "completed"]
    if pending:
        lines.append(f"  not completed ({len(pending):,}):")
        lines += [line for call in pending[:SHOWN] for line in _call_lines(call)]
        if len(pending) > SHOWN:
            lines.append(f"  ... and {len(pending) - SHOWN:,} more")
    lines.append(f"  the last {SHOWN}:")
    lines += [_call_line(call) for call in calls[-SHOWN:]]
    lines.append(f"  every call: {every} (or --json)")
    return lines
