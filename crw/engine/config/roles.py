"""The role store: `roles.toml`, the pair (agent type, model, effort) of each role.

A run pins the table in its `started` row (`role_pairs`, `policy_digest`); the
spawn hook overwrites a spawn's model and effort from the decided parts of its
role's pair (spec, session-calls.md). A role left out of the file, or a part left
out of a role, is undecided; an undecided agent_type is the one the spawn hook
pairs the role with (`default_agent_type`).

    [architect]
    agent_type = "architect"
    model = "gpt-5"
    effort = "high"
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    StrictStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from crw.engine.config._tomlsource import (
    Loc,
    TomlSource,
    crw_error,
    one_line,
    read_toml,
    validation_error,
)
from crw.engine.config.role_names import ROLES as ROLES
from crw.engine.config.role_names import default_agent_type as default_agent_type
from crw.journal.rows import PolicyRepinned, Started

Role = Literal["architect", "executor", "executor-t1", "reviewer", "explorer", "critic"]

_PAIR_KEYS = ("agent_type", "model", "effort")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class RolePair(BaseModel):
    """One role's pair. `model` and `effort` are None when undecided; an effort
    without a model is no role's pair (spec), so it is refused."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    agent_type: StrictStr
    model: StrictStr | None = None
    effort: StrictStr | None = None

    @field_validator("agent_type", "model", "effort")
    @classmethod
    def _name(cls, value: str | None, info: ValidationInfo) -> str | None:
        return checked_name(str(info.field_name), value)

    @model_validator(mode="after")
    def _effort_needs_model(self) -> RolePair:
        if self.effort is not None and self.model is None:
            raise crw_error(
                f"effort = {json.dumps(self.effort)} without a model is no role's pair",
                "add model = ... or leave effort out",
            )
        return self

    def decided(self) -> dict[str, str]:
        """The decided parts: agent_type always, model and effort when decided."""
        parts = {"agent_type": self.agent_type, "model": self.model, "effort": self.effort}
        return {key: value for key, value in parts.items() if value is not None}


def checked_name(key: str, value: str | None) -> str | None:
    """`value` of `key` when it is a name the spawn hook and the host take as it
    is: not blank, on one line, no `..`, and an agent type (which names a file on
    the host) no path. The role store's vocabulary for a model or an effort.

    Raises:
        PydanticCustomError: what is wrong and the fix, for a validator to report.
    """
    if value is None:
        return value
    if not value.strip():
        raise crw_error("an empty name", "write a name or leave the key out (undecided)")
    shown = f"{key} = {json.dumps(value)}"
    if _CONTROL.search(value):
        raise crw_error(
            f"{shown} holds a control character (a newline, a NUL, ...)",
            "write the name on one line",
        )
    if ".." in value:
        raise crw_error(f"{shown} holds '..'", "write the name without '..'")
    if key == "agent_type" and ("/" in value or "\\" in value):
        raise crw_error(
            f"{shown} holds a path separator", "write the agent type's name, not a path"
        )
    return value


class RoleTable(BaseModel):
    """The pairs of all six roles, always all six."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    roles: dict[str, RolePair]

    @model_validator(mode="after")
    def _all_six(self) -> RoleTable:
        if sorted(self.roles) != sorted(ROLES):
            raise ValueError(f"a role table holds exactly the roles {', '.join(ROLES)}")
        return self

    @classmethod
    def undecided(cls) -> RoleTable:
        """Every role undecided: the table of a store with no roles.toml."""
        return cls(roles={role: RolePair(agent_type=default_agent_type(role)) for role in ROLES})

    def role_pairs(self) -> dict[str, dict[str, str]]:
        """The decided parts of each role's pair, as the `started` row records them."""
        return {role: self.roles[role].decided() for role in ROLES}

    def policy_digest(self) -> str:
        """`"sha256:" + hex` of the table's canonical JSON.

        The canonical JSON is `role_pairs()` — an object of all six roles, each an
        object of its decided parts (`agent_type` always, `model` and `effort` only
        when decided) — dumped with sorted keys, no whitespace (separators `,` and
        `:`), `ensure_ascii=False`, encoded as UTF-8. So the digest changes when a
        pair changes and never with the file's key order, comments or spacing.
        """
        canonical = json.dumps(
            self.role_pairs(), sort_keys=True, separators=(",", ":"), ensure_ascii=False
        )
        return "sha256:" + hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def pin_rows(
    table: RoleTable, earlier: Mapping[str, Any] | None, earlier_digest: str | None, **started: Any
) -> list[Started | PolicyRepinned]:
    """The rows a process records the pairs it runs on with (CMD-NEXT-21, -38).

    Its started row pins `table` (`role_pairs`, `policy_digest`, and `started`'s
    fields: backend, process, pid). When the run's newest pins (`earlier`, the
    pairs an earlier process pinned or repinned, and `earlier_digest`) are other
    pairs than `table`'s, a policy_repinned row follows it: the process runs on
    the store as it reads now. A run that pinned nothing has nothing to repin.
    """
    pairs, digest = table.role_pairs(), table.policy_digest()
    rows: list[Started | PolicyRepinned] = [
        Started(role_pairs=pairs, policy_digest=digest, **started)
    ]
    if earlier is not None and dict(earlier) != pairs:
        rows.append(
            PolicyRepinned(pinned_digest=earlier_digest, store_digest=digest, role_pairs=pairs)
        )
    return rows


def load_roles(path: Path) -> RoleTable:
    """Read the role store at `path` (`<state>/roles.toml`).

    Returns:
        The table; with no file at `path`, every role undecided.

    Raises:
        InputError: one line `<file>:<line>: <what>; <fix>` for a file that is not
            TOML, an unknown role or key, a value of the wrong type, or an effort
            without a model. Nothing is written.
    """
    if not path.exists():
        return RoleTable.undecided()
    _, text, table = read_toml(path, "role store")
    source = TomlSource(text)
    file = str(path)
    pairs: dict[str, RolePair] = {}
    for role, value in table.items():
        if role not in ROLES:
            raise one_line(
                file,
                source.line_of((role,)),
                f"unknown role '{role}'",
                f"use one of: {', '.join(ROLES)}",
            )
        if not isinstance(value, dict):
            raise one_line(
                file,
                source.line_of((role,)),
                f"{role} = {json.dumps(value, default=str)} is not a table",
                f"write [{role}] with agent_type, model and effort",
            )
        pairs[role] = _pair(file, source, role, value)
    for role in ROLES:
        pairs.setdefault(role, RolePair(agent_type=default_agent_type(role)))
    return RoleTable(roles=pairs)


def _pair(file: str, source: TomlSource, role: str, value: dict[str, Any]) -> RolePair:
    try:
        return RolePair.model_validate({"agent_type": default_agent_type(role), **value})
    except ValidationError as err:
        # The one check of the whole pair is the effort's: point at its line.
        prefix: Loc = (role,) if err.errors()[0]["loc"] else (role, "effort")
        raise validation_error(
            file, source, err, lambda loc: (f"[{role}]", _PAIR_KEYS), prefix=prefix
        ) from None
