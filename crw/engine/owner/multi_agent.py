"""Which multi-agent protocol a session run speaks, and the preview's fact on it.

Codex gives an owner one set of multi-agent tools (docs/host.md, "Multi-agent
v2"): v2's `collaboration` tools when `[features] multi_agent_v2 = true` in
config.toml or when the owner's model is a v2 model in the host's catalog
(`model/list`'s `multiAgentVersion`), else v1's `multi_agent_v1` tools unless
`[features] multi_agent = false` turned them off. A run speaks one protocol for
its life: the start decides it from config.toml, or `$CRW_MULTI_AGENT` (`v1`,
`v2`) forces one, and run.json and the run's `started` row record it; a resumed
process reads it from the journal (a run whose rows name none started on v1).
The `multi_agent` fact names the protocol and the version the owner has, and
warns only when the owner cannot take the run's steps (no tools, or the other
version's).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from crw.errors import InputError

MultiAgent = Literal["multi_agent_v1", "multi_agent_v2"]
V1: Final = "multi_agent_v1"
V2: Final = "multi_agent_v2"
FORCE_ENV = "CRW_MULTI_AGENT"
_FORCED: dict[str, MultiAgent] = {"v1": V1, "v2": V2, V1: V1, V2: V2}


def features(config: Mapping[str, Any]) -> tuple[bool, bool]:
    """Whether a read config.toml leaves v1's tools on (`features.multi_agent`,
    on unless false) and turns v2's on (`features.multi_agent_v2`, off unless true)."""
    table = config.get("features")
    table = table if isinstance(table, dict) else {}
    return table.get("multi_agent") is not False, table.get("multi_agent_v2") is True


def forced(environ: Mapping[str, str]) -> MultiAgent | None:
    """The protocol `$CRW_MULTI_AGENT` forces, None when unset.

    Raises:
        InputError: a value other than v1 or v2.
    """
    value = environ.get(FORCE_ENV, "").strip()
    if not value:
        return None
    if value not in _FORCED:
        raise InputError(
            f"${FORCE_ENV}={value!r} names no multi-agent protocol: set it to v1 or v2, "
            "or unset it to follow config.toml's [features] multi_agent_v2"
        )
    return _FORCED[value]


def run_protocol(config: Mapping[str, Any], environ: Mapping[str, str]) -> MultiAgent:
    """The protocol a new session run speaks: the forced one, else v2 when
    config.toml turns v2 on, else v1.

    Raises:
        InputError: `$CRW_MULTI_AGENT` names no protocol.
    """
    return forced(environ) or (V2 if features(config)[1] else V1)


def resumed_protocol(journal: str | None, processes: int, spec: str | None) -> MultiAgent:
    """The protocol a run's process speaks: the journal's (a run that recorded
    started rows before the protocol was recorded ran on v1), else run.json's."""
    if journal in (V1, V2):
        return V2 if journal == V2 else V1
    if processes:
        return V1
    return V2 if spec == V2 else V1


@dataclass(frozen=True)
class OwnerTools:
    """What tells which tools the owner has: config.toml's features, the owner's
    model and the host's v2 models (None: not known), or what a host that says so
    answers for the owner (the simulated host)."""

    v1_on: bool
    v2_on: bool
    owner_model: str | None = None
    v2_models: Sequence[str] | None = None
    said: MultiAgent | None = None


def owner_has(tools: OwnerTools) -> MultiAgent | None:
    """The version of the owner's tools; None: none."""
    if tools.said is not None:
        return tools.said
    if tools.v2_on:
        return V2
    if tools.owner_model is not None and tools.v2_models and tools.owner_model in tools.v2_models:
        return V2
    return V1 if tools.v1_on else None


def problems(protocol: MultiAgent, tools: OwnerTools) -> list[str]:
    """FACTS-9: what stops the run's steps on this owner (none when its tools are
    the run's protocol)."""
    has = owner_has(tools)
    if has == protocol:
        return []
    if has is None:
        return [
            "the owner has no multi-agent tools ([features] multi_agent = false, "
            "multi_agent_v2 off): no step can be taken; set [features] multi_agent_v2 = true "
            "in config.toml and start the run again"
        ]
    why = (
        f"its model {tools.owner_model} is a v2 model in the host's catalog"
        if has == V2 and not tools.v2_on and tools.said is None
        else f"it has {has}'s tools"
    )
    other = "v2" if has == V2 else "v1"
    return [
        f"the run speaks {protocol} but the owner cannot take its steps: {why}; start the "
        f"run again with {FORCE_ENV}={other}, or give the owner {protocol}'s tools "
        "([features] multi_agent_v2 in config.toml)"
    ]
