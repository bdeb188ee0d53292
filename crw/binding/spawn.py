"""The spawn hook's decision: a pure function of the hook's input and the owner
thread's orchestrator line (spec, session-calls.md, the spawn hook).

Codex runs `crw flow hook spawn` as a PreToolUse command hook before each tool
call of a thread (host-protocol.md, Hooks). For a `spawn_agent` call of a bound
owner thread the hook refuses two spawns, a spawn by a subagent (a leaf: the
input has `agent_id`) and a full-history fork (`fork_context` anything but false
or absent: codex takes only a boolean, so a "true" is refused too), and allows
every other one with model and reasoning_effort overwritten from the decided parts
of its role's pair (`updatedInput`). The role: the first `CRW-ROLE:` line of the
message header when it names exactly one of the six, else the agent_type's
(worker is executor), else explorer. Every decision is one ledger line.

multi-agent v2's spawn (`collaborationspawn_agent`, docs/host.md) is decided
alike, with v2's fork argument: `fork_turns` absent (v2's default is `all`, a
full-history fork) is set to `"none"`, `"none"` is kept, anything else is refused
as a full-history fork. A v2 spawn names no agent_type, so none is compared.

Standard library only: a hook runs on every tool call of the thread.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from crw.binding.hook_input import V2_SPAWN_TOOL, is_spawn_tool
from crw.engine.config.role_names import ROLES, default_agent_type

EVENT = "PreToolUse"
ROLE_HEADER = "CRW-ROLE:"
MARKER_HEADER = "crw-flow-op:"
FALLBACK_ROLE = "explorer"
AUTHOR_ROLES = frozenset({"architect", "executor", "executor-t1"})
"""The roles whose calls author a change (their types: executor, architect, worker)."""

LEAF_REFUSED = "leaf_spawn_refused"
FORK_REFUSED = "full_history_fork_refused"
_REASONS = {
    LEAF_REFUSED: (
        "a subagent of a crw flow run is a leaf and never spawns agents; "
        "do the task yourself and answer as the packet says"
    ),
    FORK_REFUSED: (
        "a full-history fork keeps the parent's pair, not its role's; spawn with fork_context=false"
    ),
}
_V2_FORK_REASON = (
    "a full-history fork keeps the parent's pair, not its role's; spawn with fork_turns=\"none\""
)
V2_NO_HISTORY = "none"


@dataclass(frozen=True)
class SpawnDecision:
    """The hook's reply (its stdout JSON; None: print nothing) and the ledger line
    to append (None: none, the call is not a bound owner's spawn)."""

    reply: dict[str, Any] | None
    ledger: dict[str, Any] | None


NO_DECISION = SpawnDecision(None, None)


def header_role(message: str) -> str | None:
    """The role the first `CRW-ROLE:` line of the message header names, when it is
    exactly one of the six. The header is the lines before the first blank line.
    This parser is the flow-bound path's own (the simulated host's oracle keeps its)."""
    for line in message.split("\n"):
        if not line.strip():
            return None
        if line.startswith(ROLE_HEADER):
            named = line[len(ROLE_HEADER) :].strip()
            return named if named in ROLES else None
    return None


def type_role(agent_type: object) -> str | None:
    """The role of an agent_type: one of the six by name, worker as executor."""
    if agent_type == "worker":
        return "executor"
    return agent_type if isinstance(agent_type, str) and agent_type in ROLES else None


def marker_op(message: str) -> str | None:
    """The op (`<call>/t<k>`) of the message's `crw-flow-op: <call>/t<k>-a<n>` first line."""
    first = message.split("\n", 1)[0]
    if not first.startswith(MARKER_HEADER):
        return None
    op, dash, attempt = first[len(MARKER_HEADER) :].strip().rpartition("-a")
    call, slash, turn = op.rpartition("/t")
    if not (dash and slash and call and attempt.isdigit() and turn.isdigit()):
        return None
    return op


def decided_pair(line: dict[str, Any], role: str) -> dict[str, str] | None:
    """The decided model and effort of `role`'s pair in the line; None when the role
    is undecided (no pair, no model, or a pair that is no role's: an effort alone)."""
    pairs = line.get("helperPairs")
    pair = pairs.get(role) if isinstance(pairs, dict) else None
    if not isinstance(pair, dict) or not isinstance(pair.get("model"), str):
        return None
    decided = {"model": pair["model"]}
    if isinstance(pair.get("effort"), str):
        decided["effort"] = pair["effort"]
    return decided


def pairs_with(role: str, agent_type: object, line: dict[str, Any]) -> bool:
    """Whether `agent_type` is the one `role` pairs with: the spawn hook's table
    (executor-t1 with executor, critic with reviewer, the others their own name),
    or the agent_type the run's pair of the role names."""
    pairs = line.get("helperPairs")
    pair = pairs.get(role) if isinstance(pairs, dict) else None
    bound = pair.get("agent_type") if isinstance(pair, dict) else None
    return agent_type is not None and agent_type in (default_agent_type(role), bound)


def decide_spawn(hook_input: dict[str, Any], line: dict[str, Any] | None) -> SpawnDecision:
    """Decide one PreToolUse call by the owner's open orchestrator line (None: the
    owner is not bound, and no call of it is decided). A call whose tool_input is
    not an object is not decided either: there is no spawn to keep or refuse."""
    sent = hook_input.get("tool_input")
    tool = hook_input.get("tool_name")
    if not is_spawn_tool(tool) or line is None or not isinstance(sent, dict):
        return NO_DECISION
    v2 = tool == V2_SPAWN_TOOL
    given = sent.get("message")
    message = given if isinstance(given, str) else ""
    agent_type = sent.get("agent_type")
    named = header_role(message)
    role = named or type_role(agent_type) or FALLBACK_ROLE
    op = marker_op(message)
    warnings = _warnings(None if v2 else named, agent_type, op, line)
    if hook_input.get("agent_id") is not None:
        return _refuse(hook_input, sent, line, LEAF_REFUSED, role, op, warnings)
    if _v2_full_history(sent) if v2 else _full_history(sent.get("fork_context")):
        return _refuse(hook_input, sent, line, FORK_REFUSED, role, op, warnings, v2=v2)
    pair = decided_pair(line, role)
    updated = dict(sent)
    if v2:
        updated["fork_turns"] = V2_NO_HISTORY
    if pair is None:
        warnings.append("role_undecided")
    else:
        updated["model"] = pair["model"]
        if "effort" in pair:
            updated["reasoning_effort"] = pair["effort"]
    reply = {"hookEventName": EVENT, "permissionDecision": "allow", "updatedInput": updated}
    ledger = _ledger(hook_input, line, "allow", None, role, op, updated, warnings)
    return SpawnDecision({"hookSpecificOutput": reply}, ledger)


def _full_history(fork_context: object) -> bool:
    """Whether `fork_context` may ask for a full-history fork: anything but absent
    (None) or false. Compared by identity: 0 is not false here."""
    return fork_context is not None and fork_context is not False


def _v2_full_history(sent: dict[str, Any]) -> bool:
    """Whether a v2 spawn asks for history: `fork_turns` present and not "none"
    (absent is v2's default `all`, which the allowed spawn is rewritten out of)."""
    return "fork_turns" in sent and sent["fork_turns"] != V2_NO_HISTORY


def _warnings(
    named: str | None, agent_type: object, op: str | None, line: dict[str, Any]
) -> list[str]:
    warnings = []
    if named is not None and not pairs_with(named, agent_type, line):
        warnings.append("role_agent_type_mismatch")
    if op is None:
        author = type_role(agent_type) in AUTHOR_ROLES
        warnings.append("unrecorded_author" if author else "unrecorded_spawn")
    return warnings


def _refuse(
    hook_input: dict[str, Any],
    sent: dict[str, Any],
    line: dict[str, Any],
    refusal: str,
    role: str,
    op: str | None,
    warnings: list[str],
    *,
    v2: bool = False,
) -> SpawnDecision:
    why = _V2_FORK_REASON if v2 and refusal == FORK_REFUSED else _REASONS[refusal]
    reply = {
        "hookEventName": EVENT,
        "permissionDecision": "deny",
        "permissionDecisionReason": f"{refusal}: {why}",
    }
    ledger = _ledger(hook_input, line, "deny", refusal, role, op, sent, warnings)
    return SpawnDecision({"hookSpecificOutput": reply}, ledger)


def _ledger(
    hook_input: dict[str, Any],
    line: dict[str, Any],
    decision: str,
    refusal: str | None,
    role: str,
    op: str | None,
    spawn: dict[str, Any],
    warnings: list[str],
) -> dict[str, Any]:
    """The ledger line (without its `at`): which run decided, the host's ids of the
    call, the decision, the role, the op and the pair the spawn goes with."""
    return {
        "run_id": line.get("run_id"),
        "turn_id": hook_input.get("turn_id"),
        "tool_use_id": hook_input.get("tool_use_id"),
        "agent_id": hook_input.get("agent_id"),
        "decision": decision,
        "refusal": refusal,
        "role": role,
        "op": op,
        "agent_type": spawn.get("agent_type"),
        "model": spawn.get("model"),
        "reasoning_effort": spawn.get("reasoning_effort"),
        "warnings": warnings,
    }
