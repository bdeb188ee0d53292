"""`crw flow init [--host URI] [--model NAME] [--state DIR] [--force] [--json]`.

Writes the role store, `<state>/roles.toml`, with a pair for each of the six
roles that its host takes: a model the host serves (its `model/list`; the
simulated host's own catalog) and the role's effort (`crw.engine.config.role_choice`).
It asks the host `--host`, else the codex daemon's socket when it is there, else a
private codex app-server (which serves what the daemon on the same CODEX_HOME
serves). A store already there is replaced only with `--force`. The agent types
the host does not know are named with the fix, the tables the codex install
writes: the store it writes then passes `start`'s role_models. Exit 0 once written;
1 when there is a store already, or the host cannot be asked; 2 for a `--model`
the host does not serve.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from crw import codex_config
from crw.cli.output import emit
from crw.cli.owner.init_db import check_database, database_lines, kept_store_line, record_database
from crw.cli.run.preview import known_agent_types
from crw.cli.shell import shell_word
from crw.engine.config.role_choice import Choice, choose_pairs, store_text, unknown_types
from crw.engine.config.role_names import ROLES
from crw.engine.config.roles import RolePair
from crw.engine.owner.facts import CODEX_INSTALL
from crw.engine.run.rundir import resolve_state
from crw.errors import RefusedError
from crw.host.probe import probe_host
from crw.host.uri import HostUri, default_session_host, parse_host_uri
from crw.private import make_dirs, write_atomic

INIT_TIMEOUT = 20.0
"""Seconds the host may take to answer: a private codex app-server starts first."""


def init_command(
    *,
    host: str | None,
    model: str | None,
    state: str | None,
    force: bool,
    json: bool,
    db: str | None = None,
) -> int:
    environ = os.environ
    state_dir = resolve_state(state, environ, Path.cwd())
    path = state_dir / "roles.toml"
    there = path.exists() or path.is_symlink()
    database = check_database(db) if db is not None else None
    if database is not None and db is not None and there and not force:
        database = record_database(state_dir, db, database)
        lines = [*database_lines(database), kept_store_line(path)]
        emit(json, {"path": str(path), "kept": True, "db": database}, "\n".join(lines))
        return 0
    if there and not force:
        raise RefusedError(
            f"the role store {path} is there already: crw flow init replaces it only when "
            "told; edit it, or pass --force to write it anew"
        )
    uri = init_host(host, environ)
    probe = probe_host(uri, None, Path.cwd(), INIT_TIMEOUT)
    if probe.error is not None:
        raise RefusedError(
            f"{probe.error}; crw flow init asks the host which models it serves: start it, "
            "or pass --host unix:PATH (a running app-server) or --host codex"
        )
    takes = probe.takes
    any_model = takes.default_model if takes is not None and takes.models is None else None
    home = codex_config.codex_home(environ)
    config = codex_config.read_config(home)
    own = config.get("model") if isinstance(config.get("model"), str) else None
    choice = choose_pairs(
        probe.models or [], asked=model, any_model=any_model, host=str(uri), configured=own
    )
    _check_names(choice, uri)
    known, tables = known_agent_types(probe, home, config)
    unknown = unknown_types(choice.pairs, known)
    make_dirs(state_dir)
    write_atomic(path, store_text(choice, str(uri)).encode("utf-8"))
    if database is not None and db is not None:
        database = record_database(state_dir, db, database)
    owner = environ.get("CRW_OWNER_THREAD") or environ.get("CODEX_THREAD_ID") or None
    start = _start_hint(uri, state_dir if state else None, owner)
    payload: dict[str, Any] = {
        "path": str(path),
        "replaced": there,
        "host": str(uri),
        "model": choice.model,
        "pairs": choice.pairs,
        "agent_types_unknown": unknown,
        "config": str(tables) if unknown else None,
        "install": CODEX_INSTALL if unknown else None,
        "next": start,
        "owner": owner,
        "owner_fix": None if owner else OWNER_FIX,
        "db": database,
    }
    lines = _lines(payload) + (database_lines(database) if database is not None else [])
    emit(json, payload, "\n".join(lines))
    return 0


def init_host(host: str | None, environ: Mapping[str, str]) -> HostUri:
    """`--host`, else the codex daemon's socket when it is there, else a private
    codex app-server on the same CODEX_HOME."""
    if host:
        return parse_host_uri(host)
    daemon = default_session_host(dict(environ))
    return daemon if Path(daemon.target).exists() else HostUri("codex", "")


def _check_names(choice: Choice, uri: HostUri) -> None:
    """Refuse a model name the role store cannot hold (a control character, `..`)."""
    for role in ROLES:
        try:
            RolePair.model_validate(choice.pairs[role])
        except ValidationError:
            raise RefusedError(
                f"the host {uri} serves {choice.model!r}, a name the role store cannot hold; "
                "pass --model NAME, another model it serves"
            ) from None


OWNER_FIX = (
    "THREAD is the owner thread's id: $CODEX_THREAD_ID in a Codex thread's shell, or "
    "the id `crw host sim owner start --socket PATH` prints on the simulated host"
)
"""What the start line's `--owner THREAD` asks for, when init knows no owner."""


def _start_hint(uri: HostUri, state: Path | None, owner: str | None) -> str:
    """The start of a session run on this store (a session run shares its owner's
    host: a private codex host is not one, the daemon's socket is the default). It
    names the owner init's shell has, else `--owner THREAD`: without one the run
    starts unbound and waits."""
    where = f" --host {shell_word(str(uri))}" if uri.kind != "codex" else ""
    who = f" --owner {shell_word(owner)}" if owner else " --owner THREAD"
    return f"crw flow start WORKFLOW{where}{who}" + (
        f" --state {shell_word(state)}" if state else ""
    )


def _lines(payload: Mapping[str, Any]) -> list[str]:
    verb = "replaced" if payload["replaced"] else "wrote"
    lines = [
        f"{verb} {payload['path']}: the six roles on {payload['model']}, "
        f"from host {payload['host']}"
    ]
    for role, pair in payload["pairs"].items():
        lines.append(
            f"  {role:<12} agent_type {pair['agent_type']:<10} model {pair['model']}  "
            f"effort {pair['effort']}"
        )
    unknown = payload["agent_types_unknown"]
    if unknown:
        tables = ", ".join(f"[agents.{name}]" for name in unknown)
        lines.append(
            f"  the host does not know the agent type{'s' if len(unknown) > 1 else ''} "
            f"{', '.join(unknown)}: add {tables} with a description to {payload['config']} "
            f"with: {payload['install']}"
        )
    lines.append(f"  then start a run: {payload['next']}")
    if payload["owner_fix"]:
        lines.append(f"  {payload['owner_fix']}")
    return lines
