"""What a person does about a call held because the host refused its spawn, or
could not reach its model, or its flow evidence record could not be placed.

A dispatch report of a failed spawn (`crw flow dispatched ... --failed`) holds
the call `spawn_failed` with the host's tool output as the held row's error; a
turn the host kept retrying because its model cannot be reached holds it
`host_failure` with an error that begins UNREACHABLE (`crw.engine.answers.unreachable`);
a bind that cannot write its step's flow evidence record holds it
`evidence_assignment_failed` with the file and the OS error.
`crw flow next` and `crw flow status` show such a call with `error` and `fix`:
what to change, then the answers the held call takes.
Standard library only: `next` and `status` import it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

SPAWN_FAILED = "spawn_failed"
HOST_FAILURE = "host_failure"
EVIDENCE_ASSIGNMENT_FAILED = "evidence_assignment_failed"
"""A bind could not write the step's flow evidence record under the subagent's cwd."""
UNREACHABLE = "the model cannot be reached: "
"""How the held row's error of a model the host cannot reach begins."""


def answer_choices(backend: str | None) -> tuple[str, ...]:
    """The answers a held call of a run on `backend` takes (`crw flow answer`):
    retry, skip, abort, and restart on the session backend (an app-server run
    refuses a restart)."""
    return ("retry", "skip", "abort", *(("restart",) if backend == "session" else ()))


def held_fix(reason: str | None, answer: Mapping[str, str], error: str | None = None) -> str | None:
    """The fix of a call held for `reason` (with the held row's `error`), naming
    the commands of `answer` (by choice, retry first); None for a hold that has no
    fix of its own."""
    others = ", ".join(command for choice, command in answer.items() if choice != "retry")
    if reason == HOST_FAILURE and (error or "").startswith(UNREACHABLE):
        return (
            "the host could not reach the call's model (the error says what it said): "
            "check the model provider's base_url in $CODEX_HOME/config.toml (or the "
            f"network), then {answer['retry']} to run the turn again (or {others})"
        )
    if reason == EVIDENCE_ASSIGNMENT_FAILED:
        return (
            "the step's flow evidence record could not be written under the subagent's cwd "
            "(the error names the file and why): make that directory writable, or move what "
            f"is in the way of .crw/evidence there, then {answer['retry']} to spawn it again "
            f"(or {others})"
        )
    if reason != SPAWN_FAILED:
        return None
    return (
        "the host refused the spawn (the error says why): give the role in roles.toml a "
        "model the host serves (its model/list), or an agent_type it knows (a built-in "
        "one, or an [agents.<type>] table in $CODEX_HOME/config.toml), then "
        f"{answer['retry']} to spawn it again (or {others})"
    )


def held_entry(
    run_id: str, call: str, reason: str | None, state_ref: str, backend: str | None
) -> dict[str, Any]:
    """A held call's reason and the exact command of each answer (docs/decisions.md);
    `state_ref` is the --state those commands pass (empty: none)."""
    state = f" --state {state_ref}" if state_ref else ""
    answer = {
        choice: f"crw flow answer {run_id} {call} --{choice}{state}"
        for choice in answer_choices(backend)
    }
    return {"reason": reason or "held", "answer": answer}


def with_fix(held: dict[str, Any], error: str | None) -> dict[str, Any]:
    """A held call's entry of `next` and `status` ({call?, reason, answer}), with
    the held row's `error` and the `fix` when its reason has a fix of its own."""
    fix = held_fix(held.get("reason"), held["answer"], error)
    return held if fix is None else held | {"error": error, "fix": fix}
