"""The start preview: the host it talks to, the six roles' spawn formats, the
session pool and the facts.

This module reads what the facts need (the owner's binding, config.toml, the file
system, the host through `crw.host.probe`) and hands it to the pure judgements of
`crw.engine.owner.facts`. A session run is judged on all eight facts; an app-server run
on verifier_prerequisites and host_reachable (it has no owner or hook): its start asks
a shared host its handshake alone (which names its version), and of a private
`codex` host's binary only its `--version`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from crw import codex_config
from crw.binding.install import read_config, spawn_hooks
from crw.binding.lines import flow_bound_dir, is_segment, owner_file, read_last_line, untrusted
from crw.engine.config.roles import RoleTable
from crw.engine.config.workflow import Workflow
from crw.engine.owner import facts, multi_agent
from crw.engine.owner.facts import Fact
from crw.engine.owner.next_view import spawn_formats
from crw.engine.run.locks import run_is_live
from crw.engine.run.rundir import RunDir
from crw.errors import InputError
from crw.host.probe import HostProbe, probe_host
from crw.host.uri import HostUri
from crw.host.version import binary_version


@dataclass
class Preview:
    """What the start shows before it names the next command."""

    spawn_formats: list[dict[str, Any]] = field(default_factory=list)
    pool: dict[str, int] = field(default_factory=dict)
    facts: list[Fact] = field(default_factory=list)
    workspaces: dict[str, Any] = field(default_factory=dict)
    """Where the calls work: the run's repository and head, or plain directories."""
    host_version: str | None = None
    """The host the run talks to, as it names itself (`codex 0.169.0`, the simulated
    host); None: not known (not reached, or a preview that asked nothing)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "host_version": self.host_version,
            "spawn_formats": self.spawn_formats,
            "session_pool": self.pool or None,
            "facts": [fact.to_json() for fact in self.facts],
            "workspaces": self.workspaces or None,
        }

    def lines(self) -> list[str]:
        out = [f"  host: {self.host_version or 'not reached, its version unknown'}"]
        if self.spawn_formats:
            out.append("  spawn formats (the owner's spawn_agent of each role):")
            out += [f"    {f['role']:<12} {f['format']}" for f in self.spawn_formats]
        if self.pool:
            out.append(
                f"  session pool: {self.pool['pool']} = min(pool {self.pool['workflow_pool']}, "
                f"agents.max_threads {self.pool['max_threads']} - 1)"
            )
        out.append("  facts:")
        for fact in self.facts:
            out.append(f"    {fact.name}: {'ok' if fact.ok else 'warning'}")
            out += [f"      - {problem}" for problem in fact.problems]
        if self.workspaces.get("warning"):
            out += ["  workspaces: warning", f"      - {self.workspaces['warning']}"]
        elif self.workspaces:
            out.append(
                f"  workspaces: git worktrees of {self.workspaces['repository']} "
                f"at {str(self.workspaces['head'])[:12]}"
            )
        return out


def workspaces(repository: str | None, head: str | None) -> dict[str, Any]:
    """The preview's account of where the calls work: git worktrees of the run's
    repository at its head, or plain directories under the run, with the fix."""
    if repository is not None:
        return {"kind": "git", "repository": repository, "head": head}
    return {
        "kind": "directory",
        "repository": None,
        "head": None,
        "warning": (
            "no git checkout holds the run: every call works in a plain directory under "
            "the run (no worktrees, no node branches); start it from a checkout, or set "
            'repo = "PATH" in the workflow'
        ),
    }


def app_server_judged(
    workflow: Workflow,
    host: HostUri,
    codex_bin: str | None,
    repository: str | None = None,
    head: str | None = None,
) -> Callable[[], Preview]:
    """An app-server run's preview: verifier_prerequisites, judged for every run, and
    host_reachable. A private `codex` host is `codex_bin`, the binary the start
    found (it refuses when there is none); a shared host is asked for its handshake
    when the answer is called, as a session start asks its host."""
    verifier = _verifier(workflow)
    where = workspaces(repository, head)

    def with_host() -> Preview:
        error = None
        if host.kind != "codex":
            probe = probe_host(host, None, Path.cwd(), asks=False)
            error, version = probe.error, probe.version
        else:  # the run starts the child later: its binary says which it is
            version = binary_version(codex_bin) if codex_bin else None
        reach = facts.host_reachable(str(host), error, None, None, codex_bin)
        return Preview(facts=[verifier, reach], workspaces=where, host_version=version)

    return with_host


@dataclass(frozen=True)
class SessionStart:
    """What a session start knows when it judges the facts."""

    state: Path
    run: RunDir
    owner: str | None
    host: HostUri
    roles: RoleTable
    workflow: Workflow
    pool: int
    repository: str | None
    environ: Mapping[str, str]
    head: str | None = None


def session_judged(start: SessionStart) -> Callable[[], Preview]:
    """A session run's preview (spawn formats, pool, and the eight facts) in two
    parts: what the start reads itself (the
    owner's binding, config.toml, the file system) judged now, before it binds the
    owner; the host's part (`probe_host`) asked when the answer is called, which
    the start does once the run's process is launched: the process asks the host
    nothing before its started row, and the probe runs while it imports."""
    home = codex_config.codex_home(start.environ)
    config = codex_config.read_config(home)
    max_threads = codex_config.max_threads(start.environ)
    pairs = start.roles.role_pairs()
    reviews = [(n.id, n.role, n.review.role) for n in start.workflow.nodes if n.review]
    owner_bound, writable, slots, _, verifier = session_facts(start, config)
    pool = {"pool": start.pool, "workflow_pool": start.workflow.pool, "max_threads": max_threads}
    v2 = multi_agent.run_protocol(config, start.environ) == multi_agent.V2

    def with_host() -> Preview:
        probe = probe_host(start.host, start.owner, Path.cwd())
        agent_types, tables = known_agent_types(probe, home, config)
        roles = facts.RoleRead(pairs, probe.models, agent_types, reviews, str(tables), v2)
        judged = [
            owner_bound,
            facts.role_models(roles),
            writable,
            slots,
            _multi_agent(start, config, probe),
            verifier,
            _spawn_hook(home / "config.toml", probe),
            facts.host_reachable(str(start.host), probe.error, start.owner, probe.owner_error),
        ]
        where = workspaces(start.repository, start.head)
        return Preview(spawn_formats(pairs, v2=v2), pool, judged, where, probe.version)

    return with_host


def session_facts(start: SessionStart, config: Mapping[str, Any]) -> list[Fact]:
    """The facts a session start judges without its host: owner_bound,
    owner_state_writable, subagent_slots, multi_agent (from config.toml alone) and
    verifier_prerequisites (`config`: codex's config.toml, read).

    Raises:
        InputError: `$CRW_MULTI_AGENT` names no protocol.
    """
    return [
        facts.owner_bound(_owner_read(start)),
        facts.owner_state_writable(_unwritable(start), _distrusted(start.state)),
        facts.subagent_slots(codex_config.max_threads(start.environ)),
        _multi_agent(start, config, None),
        _verifier(start.workflow),
    ]


def _multi_agent(start: SessionStart, config: Mapping[str, Any], probe: HostProbe | None) -> Fact:
    """FACTS-9: the run's protocol against the owner's tools, as config.toml and the
    host (the owner's model in its catalog, or what a simulated host says) tell."""
    v1_on, v2_on = multi_agent.features(config)
    said = probe.takes.owner_multi_agent if probe is not None and probe.takes else None
    tools = multi_agent.OwnerTools(
        v1_on,
        v2_on,
        owner_model=probe.owner_model if probe is not None else None,
        v2_models=probe.v2_models() if probe is not None else None,
        said=said,
    )
    return facts.multi_agent(multi_agent.run_protocol(config, start.environ), tools)


def app_server_facts(workflow: Workflow) -> list[Fact]:
    """The facts an app-server start judges without its host: verifier_prerequisites."""
    return [_verifier(workflow)]


def known_agent_types(
    probe: HostProbe, home: Path, config: Mapping[str, Any]
) -> tuple[frozenset[str] | None, Path]:
    """The agent types the host knows (None: any) and the config.toml whose
    `[agents.<name>]` tables it knows: what it says (the simulated host), else
    codex's built-in types and the tables of `home`'s config.toml, read (`config`)."""
    if probe.takes is not None:
        return probe.takes.agent_types, Path(probe.takes.config)
    tables = codex_config.agent_tables(config)
    return frozenset(codex_config.BUILT_IN_AGENT_TYPES) | tables, home / "config.toml"


def _owner_read(start: SessionStart) -> facts.OwnerRead:
    run_id = start.run.root.name
    if not start.owner:
        return facts.OwnerRead(None, run_id)
    if not is_segment(start.owner):
        return facts.OwnerRead(start.owner, run_id, unreadable="the thread id is not a file name")
    try:
        last = read_last_line(owner_file(start.state, start.owner))
    except OSError as err:
        return facts.OwnerRead(start.owner, run_id, unreadable=err.strerror or str(err))
    other = last.open_run
    live = other not in (None, run_id) and run_is_live(RunDir(start.state / "flow" / str(other)))
    return facts.OwnerRead(start.owner, run_id, other, live, last.untrusted or last.unreadable)


def _unwritable(start: SessionStart) -> dict[str, str]:
    """Which of the run directory, the flow-bound directory, the host's socket and
    the repository cannot be written, and why. A missing directory is judged by
    the one it would be made in; a missing socket is host_reachable's."""
    places = {"run directory": start.run.root, "flow-bound directory": flow_bound_dir(start.state)}
    if start.repository is not None:
        places["repository"] = Path(start.repository)
    found = {what: why for what, path in places.items() if (why := _cannot_write(path))}
    socket = Path(start.host.target)
    if start.host.kind == "unix" and os.path.exists(socket) and not os.access(socket, os.W_OK):
        found["host socket"] = f"{socket}: permission denied"
    return found


def _distrusted(state: Path) -> str | None:
    bound = flow_bound_dir(state)
    return untrusted(bound, os.lstat(bound)) if bound.is_dir() or bound.is_symlink() else None


def _cannot_write(path: Path) -> str | None:
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        return f"{existing} is not a directory"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"{existing}: permission denied"
    return None


def _verifier(workflow: Workflow) -> Fact:
    go_root = workflow.verifier.go_root if workflow.verifier else None
    missing = None
    if go_root is not None:
        go = Path(go_root) / "bin" / "go"
        if not go.is_file():
            missing = f"{go} is not there"
        elif not os.access(go, os.X_OK):
            missing = f"{go} is not executable"
    return facts.verifier_prerequisites(go_root, missing)


def _spawn_hook(path: Path, probe: HostProbe) -> Fact:
    """Installed when config.toml has the hook; trusted as the host's hooks/list
    says, else as config.toml records a trusted_hash for a hook of that file. A
    host that says what it takes (the simulated host's sim/catalog) runs no hooks."""
    if probe.takes is not None:
        return facts.spawn_hook(str(path), False, None, None, runs_hooks=False)
    try:
        config = read_config(path)
    except InputError as err:
        return facts.spawn_hook(str(path), False, None, str(err))
    commands = spawn_hooks(config.data)
    trust = None
    listed = [
        hook
        for hook in probe.hooks or []
        if Path(str(hook.get("sourcePath"))) == path and hook.get("command") in commands
    ]
    if listed:
        trust = str(listed[0].get("trustStatus"))
    elif commands and _recorded_trust(config.data, path):
        trust = "recorded"
    return facts.spawn_hook(str(path), bool(commands), trust, None)


def _recorded_trust(data: dict[str, Any], path: Path) -> bool:
    hooks = data.get("hooks")
    state = hooks.get("state") if isinstance(hooks, dict) else None
    if not isinstance(state, dict):
        return False
    return any(
        key.startswith(f"{path}:pre_tool_use:") and bool(value.get("trusted_hash"))
        for key, value in state.items()
        if isinstance(value, dict)
    )
