"""The role store `crw flow init` writes: a pair for each of the six roles, of a
model the host serves and the effort the role asks for, as a file.

Pure: the host's `model/list` (and what a host that says so takes) in, the pairs
and the file's text out. Every role gets one model: the one asked for (`--model`),
else the user's own (config.toml's `model`) when the host lists it, else the
host's default, else the first it lists, else (a host that lists none and takes
any) the model its threads get. The effort is the role's (ROLE_EFFORTS): a
role that plans or judges thinks hard, one that looks around or does a small
change does not; a model that does not take it gets the nearest it takes. The
agent type is the role's own (`default_agent_type`): the spawn hook pairs the role
with it, and codex knows the types it does not build in from the
`[agents.<type>]` tables of its config.toml.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass

from crw.engine.config.role_names import ROLES, default_agent_type
from crw.errors import InputError, RefusedError
from crw.host.probe import HostModel

ROLE_EFFORTS = {
    "architect": "high",
    "executor": "medium",
    "executor-t1": "low",
    "reviewer": "high",
    "explorer": "low",
    "critic": "high",
}
"""The effort each role asks for."""

EFFORT_ORDER = ("none", "minimal", "low", "medium", "high", "xhigh", "max", "ultra")
"""Codex's efforts, least first: the nearest a model takes replaces one it does not."""

_UNPRINTABLE = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")


@dataclass(frozen=True)
class Choice:
    """The model every role gets and the six pairs, each `agent_type`, `model`, `effort`."""

    model: str
    pairs: dict[str, dict[str, str]]


def choose_pairs(
    models: Sequence[HostModel],
    *,
    asked: str | None,
    any_model: str | None,
    host: str,
    configured: str | None = None,
) -> Choice:
    """The pairs of a store for a host that lists `models`; `any_model`, the model
    its threads get when it takes any (else None); `configured`, the user's own.

    Raises:
        InputError: `asked` is not a model the host lists.
        RefusedError: the host lists no model and takes not any, and none was asked.
    """
    own = [model for model in models if model.model == configured]
    model = own[0] if asked is None and own else _model(models, asked, any_model, host)
    efforts = model.efforts if model is not None else ()
    name = model.model if model is not None else str(asked or any_model)
    pairs = {
        role: {
            "agent_type": default_agent_type(role),
            "model": name,
            "effort": nearest_effort(ROLE_EFFORTS[role], efforts),
        }
        for role in ROLES
    }
    return Choice(name, pairs)


def _model(
    models: Sequence[HostModel], asked: str | None, any_model: str | None, host: str
) -> HostModel | None:
    """The model every role gets, or None for a name the host does not list (one
    asked of, or the own model of, a host that takes any)."""
    listed = {model.model: model for model in models}
    if asked is not None:
        if asked in listed or (not listed and any_model is not None):
            return listed.get(asked)
        served = ", ".join(listed) or "none"
        raise InputError(
            f"--model {asked} is not a model the host {host} serves (model/list: {served}); "
            "pass one of them, or leave --model out for the host's default"
        )
    defaults = [model for model in models if model.default]
    if defaults or models:
        return (defaults or list(models))[0]
    if any_model is not None:
        return None
    raise RefusedError(
        f"the host {host} lists no models (model/list is empty): pass --model NAME, a "
        "model it serves"
    )


def nearest_effort(wanted: str, efforts: Sequence[str]) -> str:
    """`wanted` when the model takes it (or lists none), else the effort it takes
    nearest to it in EFFORT_ORDER (the higher of two as near)."""
    if not efforts or wanted in efforts:
        return wanted
    rank = {effort: index for index, effort in enumerate(EFFORT_ORDER)}
    known = [effort for effort in efforts if effort in rank]
    if not known:
        return efforts[0]
    target = rank.get(wanted, rank["medium"])
    return min(known, key=lambda effort: (abs(rank[effort] - target), -rank[effort]))


def unknown_types(pairs: dict[str, dict[str, str]], known: frozenset[str] | None) -> list[str]:
    """The agent types of `pairs` a host that knows `known` (None: any) does not."""
    if known is None:
        return []
    types = dict.fromkeys(pair["agent_type"] for pair in pairs.values())
    return [name for name in types if name not in known]


def store_text(choice: Choice, host: str) -> str:
    """The role store as `crw flow init` writes it: a head that says where it came
    from, then a table of each role's three parts."""
    shown = _UNPRINTABLE.sub("?", host)  # a comment holds no control character
    lines = [
        f"# The role store of crw flow, written by crw flow init for host {shown}:",
        "# each role on a model it serves. Edit it freely (docs/workflow.md): crw flow start",
        "# checks it against its host (the role_models fact).",
    ]
    for role in ROLES:
        lines.append("")
        lines.append(f"[{role}]")
        lines += [f"{key} = {json.dumps(value)}" for key, value in choice.pairs[role].items()]
    return "\n".join(lines) + "\n"
