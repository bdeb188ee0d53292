"""The simulated host's model catalog: `model/list`, and the spawns codex refuses.

A host made with a catalog (`crw host sim serve --models a,b`) acts as codex 0.163
does (host-protocol.md, What a real owner thread meets): `model/list` lists the
catalog, and `sim/spawnAgent` refuses a model outside it, then an agent_type that
is neither one of codex's built-in types nor an `[agents.<name>]` table of its
CODEX_HOME's config.toml, each with codex's words as the tool output
(`codex-rs/core/src/tools/handlers/multi_agents_common.rs`, `agent/role.rs`). The
real host leaves a started collabAgentToolCall item of the refused spawn; the sim
records no item. A host made without one lists no models and refuses no spawn.

`sim/catalog` says which of the two the host is (codex has no such method: the
start's facts and `crw flow init` judge it by its model/list and config.toml).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from crw.codex_config import BUILT_IN_AGENT_TYPES, agent_tables, read_config
from crw.host.sim.state import DEFAULT_MODEL, RpcError, invalid_request

EFFORTS = ("low", "medium", "high")
"""The efforts each catalog model takes; a spawn without one runs at medium."""

SPAWN_REFUSED = -32000
"""The code of a refused `sim/spawnAgent`: its message is the tool's output."""


@dataclass(frozen=True)
class Catalog:
    """The models the host serves and the agent types it knows."""

    models: tuple[str, ...]
    agent_types: frozenset[str] = frozenset(BUILT_IN_AGENT_TYPES)

    @classmethod
    def of(cls, models: tuple[str, ...], codex_home: Path) -> Catalog:
        known = agent_tables(read_config(codex_home))
        return cls(models, frozenset(BUILT_IN_AGENT_TYPES) | known)

    def check_spawn(self, model: str | None, agent_type: str | None) -> None:
        """Raises RpcError (SPAWN_REFUSED): codex's words for a model it does not
        serve, checked first, or an agent_type it does not know."""
        if model and model not in self.models:
            raise RpcError(
                SPAWN_REFUSED,
                f"Unknown model `{model}` for spawn_agent. Available models: "
                + ", ".join(self.models),
            )
        if agent_type and agent_type.strip() not in self.agent_types:
            raise RpcError(SPAWN_REFUSED, f"unknown agent_type '{agent_type.strip()}'")


def model_list(catalog: Catalog | None, params: dict[str, Any]) -> dict[str, Any]:
    """`model/list {cursor, limit}` as codex answers it: `{data: [Model], nextCursor}`,
    the first model the default, every one taking EFFORTS."""
    models = catalog.models if catalog is not None else ()
    cursor, limit = params.get("cursor"), params.get("limit")
    start = int(cursor) if isinstance(cursor, str) and cursor.isdigit() else 0
    if cursor is not None and start == 0 and cursor != "0":
        raise invalid_request(f"invalid cursor: {cursor}")
    end = len(models) if not isinstance(limit, int) or limit <= 0 else start + limit
    page = [_model(name, index == 0) for index, name in enumerate(models)][start:end]
    return {"data": page, "nextCursor": str(end) if end < len(models) else None}


def _model(name: str, default: bool) -> dict[str, Any]:
    return {
        "id": name,
        "model": name,
        "displayName": name,
        "description": f"{name} (simulated)",
        "hidden": False,
        "isDefault": default,
        "upgrade": None,
        "defaultReasoningEffort": "medium",
        "supportedReasoningEfforts": [
            {"reasoningEffort": effort, "description": effort} for effort in EFFORTS
        ],
        "inputModalities": ["text", "image"],
        "supportsPersonality": False,
    }


def sim_catalog(
    catalog: Catalog | None, codex_home: Path, owner_multi_agent: str | None = None
) -> dict[str, Any]:
    """`sim/catalog`: the models it serves and the agent types it knows, each null
    when it takes any (a host made without a catalog); `defaultModel`, the model a
    thread gets that names none; `config`, the config.toml whose `[agents.<name>]`
    tables it knows (read when it was made); `ownerMultiAgent`, the multi-agent
    tools of the owner the request names (`multi_agent_v1`, `multi_agent_v2`),
    null when it names none this host knows."""
    return {
        "ownerMultiAgent": owner_multi_agent,
        "models": list(catalog.models) if catalog is not None else None,
        "agentTypes": sorted(catalog.agent_types) if catalog is not None else None,
        "defaultModel": catalog.models[0] if catalog and catalog.models else DEFAULT_MODEL,
        "config": str(codex_home / "config.toml"),
    }
