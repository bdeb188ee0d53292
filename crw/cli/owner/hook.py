"""`crw flow hook spawn` and `crw flow hook install`.

`hook spawn` is a Codex PreToolUse command hook (host-protocol.md, Hooks): the tool
call as JSON on stdin, the decision as JSON on stdout, nothing for a call it leaves
alone. Codex runs it before every tool call of a thread, so its command line runs
without the command tree (`hook_fast`, called by `crw.cli.main`) and it imports
the standard library and the binding's readers only.

Its contract, whatever it is given: it keeps at most `INPUT_LIMIT` bytes of
stdin, prints valid JSON or nothing, and exits 0. It denies a spawn only by the
JSON Codex reads as a denial, never by an exit code (Codex reads an exit 2 as a
refusal of the call, of every tool, since the hook has no matcher). Whatever it
cannot read or do, an argument it does not take included, is a warning on stderr,
and the call goes ahead undecided.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, TextIO

from crw.binding.hook_input import INPUT_LIMIT, read_hook_input
from crw.cli.output import one_line

SPAWN_ARGV = ("flow", "hook", "spawn")
HELP = ("--help", "-h")
STATE = "--state"
_DRAIN = 1 << 16


@dataclass(frozen=True)
class SpawnOptions:
    """`hook spawn`'s arguments: the `--state` given, and what else was given (ignored)."""

    state: str | None
    ignored: tuple[str, ...] = ()


def hook_fast(argv: Sequence[str]) -> Callable[[], int] | None:
    """`hook spawn` for any arguments but `--help` (the command tree's), else None."""
    if tuple(argv[:3]) != SPAWN_ARGV or any(arg in HELP for arg in argv[3:]):
        return None
    options = spawn_options(argv[3:])
    return lambda: spawn_command(options.state, ignored=options.ignored)


def spawn_options(args: Sequence[str]) -> SpawnOptions:
    """The first `--state DIR` (or `--state=DIR`, DIR not empty); every other
    argument is ignored, never an input error (see the module's docstring)."""
    state: str | None = None
    ignored: list[str] = []
    rest = list(args)
    while rest:
        arg = rest.pop(0)
        if state is None and arg == STATE and rest and rest[0] and not rest[0].startswith("-"):
            state = rest.pop(0)
        elif state is None and arg.startswith(f"{STATE}=") and len(arg) > len(STATE) + 1:
            state = arg[len(STATE) + 1 :]
        else:
            ignored.append(arg)
    return SpawnOptions(state, tuple(ignored))


def spawn_command(
    state: str | None,
    *,
    ignored: Sequence[str] = (),
    stdin: BinaryIO | None = None,
    stdout: TextIO | None = None,
    environ: Mapping[str, str] | None = None,
) -> int:
    """Decide one tool call read from stdin; always 0 (see the module's docstring)."""
    if ignored:
        _warn(_ignored_warning(ignored))
    raw = _read_stdin(stdin)
    if raw is None:
        return 0
    read = read_hook_input(raw)
    _warn(read.warning)
    if read.call is None:
        return 0
    env = os.environ if environ is None else environ
    try:
        reply = _decide(read.call, state, env)
    except Exception as err:  # the contract: never a traceback, never a refused call
        _warn(f"the spawn hook failed ({type(err).__name__}: {err}); the tool call goes ahead")
        return 0
    if reply is not None:
        print(reply, file=stdout or sys.stdout)
    return 0


def _decide(call: dict[str, Any], state: str | None, env: Mapping[str, str]) -> str | None:
    """The reply's text for one spawn_agent call (None: none), its ledger line written."""
    from crw.binding.ledger import append_decision, read_binding
    from crw.binding.spawn import decide_spawn
    from crw.clock import system_clock
    from crw.engine.run.rundir import resolve_state

    owner = str(call.get("session_id") or env.get("CODEX_THREAD_ID") or "")
    cwd = call.get("cwd")
    state_dir = resolve_state(state, env, Path(cwd) if isinstance(cwd, str) else Path.cwd())
    binding = read_binding(state_dir, owner)
    _warn(binding.warning)
    decision = decide_spawn(call, binding.line)
    # ASCII: the reply is valid JSON whatever the encoding of the hook's stdout.
    reply = None if decision.reply is None else json.dumps(decision.reply, allow_nan=False)
    if decision.ledger is not None:
        _warn(append_decision(state_dir, owner, {"at": system_clock()} | decision.ledger))
    return reply


def _read_stdin(stdin: BinaryIO | None) -> bytes | None:
    """At most INPUT_LIMIT + 1 bytes of the hook's stdin, the rest read and dropped
    so the writer (codex) is not cut off mid-write; None, with a warning, when
    stdin cannot be read (closed, or an I/O error)."""
    source = stdin or (sys.stdin.buffer if sys.stdin is not None else None)
    try:
        if source is None:
            raise OSError("there is no stdin")
        raw = source.read(INPUT_LIMIT + 1)
        if len(raw) > INPUT_LIMIT:
            while source.read(_DRAIN):
                pass
    except (OSError, ValueError) as err:  # ValueError: a closed file
        _warn(f"cannot read the hook's input ({err}); the tool call goes ahead undecided")
        return None
    return raw


def _ignored_warning(ignored: Sequence[str]) -> str:
    import difflib
    import shlex

    given = " ".join(shlex.quote(arg) for arg in ignored)
    names = [arg.split("=")[0] for arg in ignored]
    typo = [name for name in names if name != STATE and difflib.get_close_matches(name, [STATE])]
    meant = f" ({typo[0]}: did you mean {STATE}?)" if typo else ""
    return (
        f"crw flow hook spawn ignores {given}{meant}: it takes one {STATE} DIR only, and goes "
        "on without them; fix the hook's command in codex's config.toml (the "
        '[[hooks.PreToolUse.hooks]] command = "... crw flow hook spawn [--state DIR]")'
    )


def _warn(warning: str | None) -> None:
    if warning is not None:
        print(f"crw: warning: {one_line(warning)}", file=sys.stderr)
