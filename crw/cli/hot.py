"""The plain command lines of the owner's and a run's commands, the run process and
the simulated host, run without the command tree.

The owner runs `next`, `status` and `dispatched` again and again, each a fresh
process, and the command tree's import (cyclopts) is about a third of the cold
start of `next` and `status`, a sixth of `dispatched`'s; every test and drill
starts runs, every start and resume waits for the run process's first row, every
benchmark's and many tests' trials for a fresh simulated host. `parse`
(`parse_serve` for the host) takes only the plain forms of their command lines:

    flow next RUN [--wait SECONDS] [--state DIR] [--json]
    flow status RUN [--state DIR] [--json] [--all] [--results]
    flow dispatched RUN CALL --agent ID --k K --attempt N [--wait SECONDS]
        [--state DIR] [--json]
    flow start WORKFLOW [--owner ID] [--backend session|app-server] [--host URI]
        [--codex-bin PATH] [--db URL] [--state DIR] [--json] [--trace] [--wait]
    flow resume RUN [--detach] [--db URL] [--state DIR] [--json]
    flow _run RUN [--state DIR]
    flow wait RUN [--timeout SECONDS] [--state DIR] [--json]
    host sim serve --socket PATH [--codex-home DIR] [--models NAMES]

options in any order, each at most once, no value (RUN, CALL, ID, DIR, ...)
starting with `-` nor empty, CALL and ID (and the owner's) one line as the
command tree's check has them, K and N digits, SECONDS digits with an optional
decimal part; it answers None for every other command line (`dispatched
--failed`, `start --input`, `--dry-run`, `start --timeout` among them), which the
command tree parses: help, every error and every other spelling stay its own.
What `parse` takes it answers as the command tree binds it (the same command,
the same arguments, defaults included: tests/cli/test_cold_start.py compares
them), so the command prints and exits the same either way. Standard library
only, and `crw.cli.output.one_line` for the ids.

`next` and `status` run with the cyclic garbage collector off: each is a short process
that keeps what it reads (a run of 10,000 calls is some 100,000 objects), which
the collector would walk again and again as they are made, to free nothing; it
costs about a tenth of `next` on such a run. What `next --wait` reads again is
only what the journal appended. The run process (`_run`) starts up with it off
too, and lets it run once its start-up is done (`crw.actors.run.run_command`).
"""

from __future__ import annotations

import gc
import importlib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

_SECONDS = re.compile(r"[0-9]+(\.[0-9]+)?")
_WHOLE = re.compile(r"[0-9]+")
_STATE = {"--state": "state"}
_JSON = {"--json": "json"}
_STATE_JSON = {"state": None, "json": False}


@dataclass(frozen=True)
class _Form:
    """A verb's plain form: its flags and valued options (as typed: the parameter
    each sets), its positional arguments in order, the options it must have, and
    every parameter's default as the command tree has it."""

    flags: dict[str, str]
    values: dict[str, str]
    defaults: dict[str, Any]
    positional: tuple[str, ...] = ("run",)
    required: tuple[str, ...] = ()


_FORMS = {
    "next": _Form(_JSON, {"--wait": "wait"} | _STATE, {"wait": 0, "state": None, "json": False}),
    "status": _Form(
        _JSON | {"--all": "all_calls", "--results": "results"},
        _STATE,
        {"state": None, "json": False, "all_calls": False, "results": False},
    ),
    "_run": _Form({}, _STATE, {"state": None}),
    "dispatched": _Form(
        _JSON,
        {"--agent": "agent", "--k": "k", "--attempt": "attempt", "--wait": "wait"} | _STATE,
        {"failed": None, "wait": 120.0, "state": None, "json": False},
        ("run", "call"),
        ("agent", "k", "attempt"),  # --failed is the command tree's
    ),
    "start": _Form(
        _JSON | {"--trace": "trace", "--wait": "wait"},
        {"--backend": "backend", "--owner": "owner", "--host": "host"}
        | {"--codex-bin": "codex_bin", "--db": "db"}
        | _STATE,
        {"backend": "session", "owner": None, "host": None, "codex_bin": None}
        | {"trace": False, "inputs": None, "input_files": None, "dry_run": False}
        | {"wait": False, "timeout": None, "db": None, "state": None, "json": False},
        ("workflow",),
    ),
    "resume": _Form(
        _JSON | {"--detach": "detach"},
        {"--db": "db"} | _STATE,
        {"detach": False, "db": None, "state": None, "json": False},
    ),
    "pause": _Form(
        _JSON, {"--wait": "wait"} | _STATE, {"wait": 120.0, "state": None, "json": False}
    ),
    "cancel": _Form(
        _JSON, {"--wait": "wait"} | _STATE, {"wait": 120.0, "state": None, "json": False}
    ),
    "answer": _Form(
        _JSON
        | {"--retry": "retry", "--skip": "skip", "--abort": "abort"}
        | {"--restart": "restart", "--no-resume": "no_resume"},
        {"--wait": "wait"} | _STATE,
        {"retry": False, "skip": False, "abort": False, "restart": False}
        | {"no_resume": False, "wait": 60.0, "state": None, "json": False},
        ("run", "call"),
    ),
    "wait": _Form(_JSON, {"--timeout": "timeout"} | _STATE, {"timeout": None} | _STATE_JSON),
    "shadow": _Form(_JSON, _STATE, {"state": None, "json": False}),
    "call": _Form(
        _JSON | {"--answer-only": "answer_only", "--transcript": "transcript"},
        _STATE,
        {"state": None, "json": False, "answer_only": False, "transcript": False},
        ("run", "call"),
    ),
}
_COMMANDS = {
    "next": ("crw.cli.owner.next", "next_command"),
    "status": ("crw.cli.read.status", "status_command"),
    "_run": ("crw.cli.run.resume", "run_and_wait"),
    "dispatched": ("crw.cli.owner.dispatched", "dispatched_command"),
    "start": ("crw.cli.run.start", "start_command"),
    "resume": ("crw.cli.run.resume", "resume_command"),
    "pause": ("crw.cli.run.pause", "pause_command"),
    "cancel": ("crw.cli.run.cancel", "cancel_command"),
    "answer": ("crw.cli.run.answer", "answer_flags_command"),
    "wait": ("crw.cli.read.wait", "wait_command"),
    "shadow": ("crw.cli.read.shadow", "shadow_command"),
    "call": ("crw.cli.read.call", "call_command"),
}
"""The function each verb's command in the tree calls, which takes its arguments
as the tree binds them (`start`'s without `dry_run`: its plain form has none)."""
_IDS = ("call", "agent", "owner")
"""What the command tree checks is one line (`crw.cli.params.Id`, `one_line_id`)."""
_BACKENDS = ("session", "app-server")


def parse(argv: Sequence[str]) -> tuple[str, dict[str, Any]] | None:
    """The command (a verb of _FORMS) and its arguments, for a plain form; else None."""
    if len(argv) < 3 or argv[0] != "flow" or argv[1] not in _FORMS:
        return None
    verb = argv[1]
    form = _FORMS[verb]
    positional = list(form.positional)
    given: dict[str, Any] = {}
    tokens = iter(argv[2:])
    for token in tokens:
        if token in form.flags and form.flags[token] not in given:
            given[form.flags[token]] = True
        elif token in form.values and form.values[token] not in given:
            given[form.values[token]] = next(tokens, "")
        elif positional:
            given[positional.pop(0)] = token
        else:
            return None
    if any(not isinstance(v, bool) and (v == "" or v.startswith("-")) for v in given.values()):
        return None
    if positional or any(name not in given for name in form.required):
        return None
    for seconds in ("wait", "timeout"):
        if isinstance(given.get(seconds), str):  # start's --wait is a flag
            if _SECONDS.fullmatch(given[seconds]) is None:
                return None
            given[seconds] = float(given[seconds])
    if given.get("backend", "session") not in _BACKENDS:
        return None
    for whole in ("k", "attempt"):
        if whole in given:
            if _WHOLE.fullmatch(given[whole]) is None:
                return None
            given[whole] = int(given[whole])
    if any(name in given for name in _IDS) and not _one_line(given, _IDS):
        return None
    first = form.positional[0]
    return verb, {first: given.pop(first)} | form.defaults | given


def _one_line(given: dict[str, Any], names: Sequence[str]) -> bool:
    """Whether each of `names` given is one line as `crw.cli.output.one_line` has it."""
    from crw.cli.output import one_line

    return all(one_line(given[name]) == given[name] for name in names if name in given)


_SERVE = ("host", "sim", "serve")
_SERVE_VALUES = {"--socket": "socket", "--codex-home": "codex_home", "--models": "models"}


def parse_serve(argv: Sequence[str]) -> dict[str, str | None] | None:
    """The arguments of `host sim serve --socket PATH [--codex-home DIR] [--models
    NAMES]` (options in any order, each once, no value empty or starting with `-`),
    as the command tree binds them; None for any other command line. A benchmark or
    a test starts a simulated host for each trial, and the command tree is a third
    of its start."""
    if tuple(argv[:3]) != _SERVE:
        return None
    given: dict[str, str] = {}
    tokens = iter(argv[3:])
    for token in tokens:
        name = _SERVE_VALUES.get(token)
        if name is None or name in given:
            return None
        given[name] = next(tokens, "")
    if "socket" not in given or any(v == "" or v.startswith("-") for v in given.values()):
        return None
    return {"socket": given["socket"]} | {"codex_home": None, "models": None} | given


def hot_command(argv: Sequence[str]) -> Callable[[], int] | None:
    """The command a plain form runs, ready to call; None for any other command line."""
    serving = parse_serve(argv)
    if serving is not None:  # a long process: the collector stays on
        return lambda: _serve(**serving)
    parsed = parse(argv)
    if parsed is None:
        return None
    verb, arguments = parsed
    if verb in ("next", "status", "_run"):
        # A long process (_run) turns it on again once it has started up.
        gc.disable()  # before the imports, which make long-lived objects only
    if verb == "start":
        del arguments["dry_run"]  # False: the tree's `start` then runs start_command
    module, name = _COMMANDS[verb]
    command = getattr(importlib.import_module(module), name)
    return lambda: command(**arguments)


def _serve(socket: str | None, codex_home: str | None, models: str | None) -> int:
    """`crw host sim serve` as the command tree runs it (`app.serve`)."""
    from pathlib import Path

    from crw.host.sim.serve import serve_command

    assert socket is not None
    return serve_command(Path(socket), Path(codex_home) if codex_home else None, models)
