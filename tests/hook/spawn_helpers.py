"""Running `crw flow hook spawn` on one tool call: a bound owner, the hook's input
as codex sends it (host-protocol.md, Hooks), the reply and the ledger lines."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from crw.binding.ledger import ledger_file
from crw.binding.owner import bind_owner
from crw.cli.owner.hook import spawn_command

OWNER = "019a-owner"
RUN = "fix-20261130-abc"
PAIRS: dict[str, dict[str, str]] = {
    "architect": {"agent_type": "architect", "model": "gpt-arch", "effort": "high"},
    "executor": {"agent_type": "executor", "model": "gpt-exec", "effort": "medium"},
    "executor-t1": {"agent_type": "executor", "model": "gpt-t1"},
    "reviewer": {"agent_type": "reviewer"},
    "explorer": {"agent_type": "explorer", "model": "gpt-explore", "effort": "low"},
    "critic": {"agent_type": "reviewer", "model": "gpt-critic", "effort": "xhigh"},
}
STAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z")


def bind(state: Path, pairs: dict[str, dict[str, str]] = PAIRS) -> None:
    bind_thread(state, OWNER, pairs)


def bind_thread(state: Path, owner: str, pairs: dict[str, dict[str, str]]) -> None:
    """Bind `owner` to RUN by an orchestrator line with `pairs`, as a start does."""
    line = {"kind": "orchestrator", "run_id": RUN, "policyDigest": "sha256:d", "helperPairs": pairs}
    assert bind_owner(state, owner, line, lambda _run: False).bound


def spawn_input(
    message: str, agent_type: str | None = "explorer", **tool_input: Any
) -> dict[str, Any]:
    """The hook's stdin for the owner's spawn_agent call (a subagent's adds agent_id)."""
    sent: dict[str, Any] = {"message": message, "model": "gpt-sent", "reasoning_effort": "minimal"}
    if agent_type is not None:
        sent["agent_type"] = agent_type
    return {
        "session_id": OWNER,
        "turn_id": "turn-1",
        "transcript_path": "/x/rollout.jsonl",
        "cwd": "/",
        "hook_event_name": "PreToolUse",
        "model": "gpt-owner",
        "permission_mode": "bypassPermissions",
        "tool_name": "spawn_agent",
        "tool_input": sent | tool_input,
        "tool_use_id": "call_1",
    }


@dataclass(frozen=True)
class Hooked:
    stdout: str
    ledger: list[dict[str, Any]]
    """The ledger's lines, each `at` checked as a stamp and left out."""

    @property
    def reply(self) -> dict[str, Any]:
        value = json.loads(self.stdout)
        assert isinstance(value, dict)
        return value


def run_hook(
    state: Path, hook_input: dict[str, Any], environ: dict[str, str] | None = None
) -> Hooked:
    out = io.StringIO()
    code = spawn_command(
        str(state),
        stdin=io.BytesIO(json.dumps(hook_input).encode()),
        stdout=out,
        environ=environ or {},
    )
    assert code == 0
    return Hooked(out.getvalue(), ledger_lines(state))


def ledger_lines(state: Path, owner: str = OWNER) -> list[dict[str, Any]]:
    path = ledger_file(state, owner)
    if not path.exists():
        return []
    lines = [json.loads(raw) for raw in path.read_text().splitlines()]
    for line in lines:
        assert STAMP.fullmatch(line.pop("at")), line
    return lines


def allow(updated: dict[str, Any]) -> dict[str, Any]:
    return {
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "allow",
            "updatedInput": updated,
        }
    }


def entry(**fields: Any) -> dict[str, Any]:
    """A ledger line of an allowed owner's spawn of `spawn_input`, with `fields` changed."""
    return {
        "run_id": RUN,
        "turn_id": "turn-1",
        "tool_use_id": "call_1",
        "agent_id": None,
        "decision": "allow",
        "refusal": None,
        "role": "explorer",
        "op": None,
        "agent_type": "explorer",
        "model": "gpt-explore",
        "reasoning_effort": "low",
        "warnings": [],
    } | fields


def hook_process(
    stdin: bytes | None, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[bytes]:
    """`crw flow hook spawn ARGS` as codex runs it: a process of its own, `stdin` as
    given (bytes: any; None: no stdin at all, its descriptor closed), the
    environment without the caller's CRW_ and CODEX_ variables, plus `env`. The
    process is waited for (killed at its timeout)."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("CRW_", "CODEX_"))}
    command = [sys.executable, "-m", "crw", "flow", "hook", "spawn", *args]
    if stdin is None:
        command = ["/bin/sh", "-c", 'exec "$0" "$@" <&-', *command]
    return subprocess.run(
        command,
        input=stdin,
        capture_output=True,
        timeout=60,
        env=clean | (env or {}),
        cwd="/",
    )
