"""`crw flow hook spawn` and `crw flow hook install`.

`hook spawn` is a Codex PreToolUse command hook (host-protocol.md, Hooks): the tool
call as JSON on stdin, the decision as JSON on stdout, nothing for a call it leaves
alone. Codex runs it before every tool call of a thread, so its plain command line
runs without the command tree (`hook_fast`, called by `crw.cli.main`) and it
imports the standard library and the binding's readers only. It never exits 2
(codex reads that as a refusal): whatever goes wrong on its side is a warning on
stderr and the call goes ahead.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

SPAWN_ARGV = ("flow", "hook", "spawn")


def hook_fast(argv: Sequence[str]) -> Callable[[], int] | None:
    """`hook spawn` for its plain forms (`flow hook spawn [--state DIR]`), else None."""
    if tuple(argv[:3]) != SPAWN_ARGV:
        return None
    rest = list(argv[3:])
    if not rest:
        return lambda: spawn_command(None)
    if len(rest) == 2 and rest[0] == "--state" and rest[1] and not rest[1].startswith("-"):
        return lambda: spawn_command(rest[1])
    return None


def spawn_command(
    state: str | None,
    *,
    stdin: TextIO | None = None,
    stdout: TextIO | None = None,
    environ: Mapping[str, str] | None = None,
) -> int:
    """Decide one tool call read from stdin; always 0 (see the module's docstring)."""
    hook_input = _read_input((stdin or sys.stdin).read())
    if hook_input is None or hook_input.get("tool_name") != "spawn_agent":
        return 0
    from crw.binding.ledger import append_decision, read_binding
    from crw.binding.spawn import decide_spawn
    from crw.clock import system_clock
    from crw.engine.rundir import resolve_state

    env = os.environ if environ is None else environ
    owner = hook_input.get("session_id") or env.get("CODEX_THREAD_ID") or ""
    cwd = hook_input.get("cwd")
    state_dir = resolve_state(state, env, Path(cwd) if isinstance(cwd, str) else Path.cwd())
    binding = read_binding(state_dir, str(owner))
    _warn(binding.warning)
    decision = decide_spawn(hook_input, binding.line)
    if decision.ledger is not None:
        _warn(append_decision(state_dir, str(owner), {"at": system_clock()} | decision.ledger))
    if decision.reply is not None:
        print(json.dumps(decision.reply, ensure_ascii=False), file=stdout or sys.stdout)
    return 0


def _read_input(raw: str) -> dict[str, Any] | None:
    try:
        hook_input = json.loads(raw)
    except json.JSONDecodeError as err:
        _warn(f"the hook's input is not JSON ({err}); the tool call goes ahead undecided")
        return None
    return hook_input if isinstance(hook_input, dict) else None


def _warn(warning: str | None) -> None:
    if warning is not None:
        print(f"crw: warning: {warning}", file=sys.stderr)
