"""`crw flow next`, `crw flow status`, the run process and the simulated host without
the command tree.

The owner runs `next` and `status` again and again, each a fresh process, and the
command tree's import (cyclopts) is about a third of their cold start; every start
and resume waits for the run process's first row, every benchmark's and many
tests' trials for a fresh simulated host. `parse` (`parse_serve` for the host)
takes only the plain forms of their command lines:

    flow next RUN [--wait SECONDS] [--state DIR] [--json]
    flow status RUN [--state DIR] [--json] [--all] [--results]
    flow _run RUN [--state DIR]
    host sim serve --socket PATH [--codex-home DIR] [--models NAMES]

options in any order, each at most once, RUN and DIR not starting with `-` nor
empty, SECONDS digits with an optional decimal part; it answers None for every
other command line, which the command tree parses: help, every error and every
other spelling stay its own. What `parse` takes it answers as the command tree
binds it (the same command, the same arguments, defaults included:
tests/cli/test_cold_start.py compares them), so the command prints and exits
the same either way. Standard library only.

`next` and `status` run with the cyclic garbage collector off: each is a short process
that keeps what it reads (a run of 10,000 calls is some 100,000 objects), which
the collector would walk again and again as they are made, to free nothing; it
costs about a tenth of `next` on such a run. What `next --wait` reads again is
only what the journal appended. The run process (`_run`) starts up with it off
too, and lets it run once its start-up is done (`crw.actors.run.run_command`).
"""

from __future__ import annotations

import gc
import re
from collections.abc import Callable, Sequence
from typing import Any

_SECONDS = re.compile(r"[0-9]+(\.[0-9]+)?")
_FLAGS: dict[str, dict[str, str]] = {
    "next": {"--json": "json"},
    "status": {"--json": "json", "--all": "all_calls", "--results": "results"},
    "_run": {},
}
_VALUES = {
    "next": {"--wait": "wait", "--state": "state"},
    "status": {"--state": "state"},
    "_run": {"--state": "state"},
}
_DEFAULTS: dict[str, dict[str, Any]] = {
    "next": {"wait": 0, "state": None, "json": False},
    "status": {"state": None, "json": False, "all_calls": False, "results": False},
    "_run": {"state": None},
}


def parse(argv: Sequence[str]) -> tuple[str, dict[str, Any]] | None:
    """The command (`next`, `status` or `_run`) and its arguments, for a plain form;
    else None."""
    if len(argv) < 3 or argv[0] != "flow" or argv[1] not in _DEFAULTS:
        return None
    verb = argv[1]
    flags, values = _FLAGS[verb], _VALUES[verb]
    given: dict[str, Any] = {}
    tokens = iter(argv[2:])
    for token in tokens:
        if token in flags and flags[token] not in given:
            given[flags[token]] = True
        elif token in values and values[token] not in given:
            given[values[token]] = next(tokens, "")
        elif "run" not in given:
            given["run"] = token
        else:
            return None
    if any(not isinstance(v, bool) and (v == "" or v.startswith("-")) for v in given.values()):
        return None
    if "run" not in given:
        return None
    if "wait" in given:
        if _SECONDS.fullmatch(given["wait"]) is None:
            return None
        given["wait"] = float(given["wait"])
    return verb, {"run": given.pop("run")} | _DEFAULTS[verb] | given


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
    if verb == "_run":  # a long process: the collector runs once it has started up
        gc.disable()  # before its imports, which make long-lived objects only
        from crw.cli.run.resume import run_and_wait

        return lambda: run_and_wait(**arguments)
    gc.disable()
    if verb == "next":
        from crw.cli.owner.next import next_command

        return lambda: next_command(**arguments)
    from crw.cli.read.status import status_command

    return lambda: status_command(**arguments)


def _serve(socket: str | None, codex_home: str | None, models: str | None) -> int:
    """`crw host sim serve` as the command tree runs it (`app.serve`)."""
    from pathlib import Path

    from crw.host.sim.serve import serve_command

    assert socket is not None
    return serve_command(Path(socket), Path(codex_home) if codex_home else None, models)
