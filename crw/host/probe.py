"""What the start preview asks a run's shared host, bounded in time.

One connection: initialize (the host's version, from its userAgent), then, for a
session run, `thread/read` of the owner
thread, `model/list` (every page), `hooks/list` and `sim/catalog` (the simulated
host says there what it takes; codex refuses it); an app-server run's start asks
the handshake alone. The whole probe gets PROBE_TIMEOUT seconds (or the timeout
given): a host that never answers costs the start that much and a warning, never
a hang. A request the host refuses leaves its part unknown.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import trio

from crw.host.errors import HostRequestError
from crw.host.transport import HostError
from crw.host.uri import HostUri
from crw.host.version import host_version

PROBE_TIMEOUT = 3.0
"""Seconds the whole probe of the host may take."""
MAX_PAGES = 20
"""Pages of `model/list` read at most."""


@dataclass(frozen=True)
class HostModel:
    """A model as the host's `model/list` answers it."""

    model: str
    efforts: tuple[str, ...] = ()
    default: bool = False
    """The host's default model (`isDefault`)."""
    multi_agent_version: str | None = None
    """Which multi-agent tools an owner on it gets (`multiAgentVersion`: `v1`,
    `v2`; None when the host does not say)."""


@dataclass(frozen=True)
class HostTakes:
    """What a host that says so takes (the simulated host's `sim/catalog`): the
    models and the agent types, None when it takes any; the model a thread gets
    that names none; the config.toml whose `[agents.<name>]` tables it knows."""

    models: tuple[str, ...] | None
    agent_types: frozenset[str] | None
    default_model: str
    config: str
    owner_multi_agent: Literal["multi_agent_v1", "multi_agent_v2"] | None = None
    """The multi-agent tools the owner has, when the host says so."""


@dataclass
class HostProbe:
    """What the host answered: `error` when it did not (then nothing else is known)."""

    error: str | None = None
    owner_error: str | None = None
    models: list[HostModel] | None = None
    hooks: list[dict[str, Any]] | None = field(default=None)
    takes: HostTakes | None = None
    """What the host says it takes; None when it does not say (codex)."""
    version: str | None = None
    """The host as the preview names it (`codex 0.169.0`; crw.host.version)."""
    owner_model: str | None = None
    """The owner thread's model, as its `thread/read` answers."""

    def v2_models(self) -> list[str] | None:
        """The models whose owners get multi-agent v2 (None: no catalog read)."""
        if self.models is None:
            return None
        return [m.model for m in self.models if m.multi_agent_version == "v2"]


def probe_host(
    uri: HostUri,
    owner: str | None,
    cwd: Path,
    timeout: float = PROBE_TIMEOUT,
    *,
    asks: bool = True,
) -> HostProbe:
    """Ask the host `uri` what the facts need, in `timeout` seconds; see the module
    docstring (`asks` False: its handshake alone, all an app-server run's facts
    need). A shell that may open no socket (codex's workspace-write sandbox without
    network access: trio cannot even make its wakeup socket) knows nothing of the
    host."""
    try:
        return trio.run(_probe, uri, owner, cwd, timeout, asks)
    except OSError as err:
        return HostProbe(error=f"cannot open a socket here to reach the host {uri}: {err}")


async def _probe(
    uri: HostUri, owner: str | None, cwd: Path, seconds: float, asks: bool
) -> HostProbe:
    from crw.host.connect import connect_host

    probe = HostProbe(error=f"the host {uri} did not answer within {seconds:g} s")
    with trio.move_on_after(seconds):
        try:
            async with connect_host(uri, follows=frozenset()) as client:
                probe.error = None
                probe.version = host_version(client.user_agent)
                if not asks:
                    return probe
                if owner:
                    probe.owner_error, probe.owner_model = await _owner_read(client, owner)
                probe.models = await _models(client)
                probe.hooks = await _hooks(client, cwd)
                probe.takes = await _takes(client, owner)
        except HostError as err:
            probe.error = str(err)
    return probe


async def _owner_read(client: Any, owner: str) -> tuple[str | None, str | None]:
    """Why the owner thread cannot be read, else None and its model."""
    try:
        read = await client.request("thread/read", {"threadId": owner, "includeTurns": False})
    except HostRequestError as err:
        return " ".join(err.message.split()) or f"code {err.code}", None
    thread = read.get("thread") if isinstance(read, dict) else None
    model = thread.get("model") if isinstance(thread, dict) else None
    return None, model if isinstance(model, str) else None


async def _models(client: Any) -> list[HostModel] | None:
    models: list[HostModel] = []
    cursor = None
    for _ in range(MAX_PAGES):
        try:
            page = await client.request("model/list", {"cursor": cursor})
        except HostRequestError:
            return None
        models += [_model(entry) for entry in page.get("data") or [] if isinstance(entry, dict)]
        cursor = page.get("nextCursor")
        if not cursor:
            break
    return models


def _model(entry: dict[str, Any]) -> HostModel:
    listed = entry.get("supportedReasoningEfforts") or []
    names = [e.get("reasoningEffort") for e in listed if isinstance(e, dict)]
    efforts = tuple(str(name) for name in names if name)
    version = entry.get("multiAgentVersion")
    return HostModel(
        str(entry.get("model")),
        efforts,
        entry.get("isDefault") is True,
        str(version) if isinstance(version, str) else None,
    )


async def _hooks(client: Any, cwd: Path) -> list[dict[str, Any]] | None:
    try:
        answer = await client.request("hooks/list", {"cwds": [str(cwd)]})
    except HostRequestError:
        return None
    entries = answer.get("data") or []
    return [hook for entry in entries for hook in entry.get("hooks") or []]


async def _takes(client: Any, owner: str | None) -> HostTakes | None:
    try:
        answer = await client.request("sim/catalog", {"owner": owner} if owner else {})
    except HostRequestError:
        return None
    models, types = answer.get("models"), answer.get("agentTypes")
    return HostTakes(
        tuple(str(model) for model in models) if isinstance(models, list) else None,
        frozenset(str(name) for name in types) if isinstance(types, list) else None,
        str(answer.get("defaultModel")),
        str(answer.get("config")),
        _said(answer.get("ownerMultiAgent")),
    )


def _said(value: Any) -> Literal["multi_agent_v1", "multi_agent_v2"] | None:
    if value == "multi_agent_v2":
        return "multi_agent_v2"
    return "multi_agent_v1" if value == "multi_agent_v1" else None
