"""The role store's pairs as `crw flow next` reads them: with the TOML parser alone
while it can (tomli), with the role store's models (pydantic) only when it must,
so next's cold start does not pay for them on every read."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from crw.engine.config.role_names import ROLES, default_agent_type
from crw.errors import CrwError

log = logging.getLogger("crw.next")


def store_pairs(
    state_dir: Path, pinned: Mapping[str, Any] | None = None
) -> dict[str, dict[str, str]]:
    """The role store's pairs; a store that cannot be read is warned about and
    answers every role undecided (a resume then refuses it itself), as does a state
    directory with no store. A store that reads as plain TOML the `pinned` pairs is
    those pairs (the pins were checked when pinned), without the role store's
    checks (pydantic: next's cold start must not pay for it unless it must)."""
    path = state_dir / "roles.toml"
    if not path.exists():
        return {role: {"agent_type": default_agent_type(role)} for role in ROLES}
    plain = plain_pairs(path) if pinned is not None else None
    if plain is not None and plain == pinned:
        return plain
    from crw.engine.config.roles import RoleTable, load_roles

    try:
        return load_roles(path).role_pairs()
    except CrwError as err:
        log.warning("%s", err)
        return RoleTable.undecided().role_pairs()


def plain_pairs(path: Path) -> dict[str, dict[str, str]] | None:
    """The store's pairs when it is plain TOML of the six roles' string parts, else
    None (then only the role store's own reading tells)."""
    import tomli

    try:
        table = tomli.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomli.TOMLDecodeError):
        return None
    pairs = {role: {"agent_type": default_agent_type(role)} for role in ROLES}
    for role, parts in table.items():
        if role not in pairs or not isinstance(parts, dict):
            return None
        if not set(parts) <= {"agent_type", "model", "effort"}:
            return None
        if not all(isinstance(value, str) for value in parts.values()):
            return None
        pairs[role] |= parts
    return pairs
