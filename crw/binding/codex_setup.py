"""What `crw flow codex install` adds to a CODEX_HOME besides the spawn hook: the
owner's skill and the `[agents.<type>]` tables of the role store's agent types.

codex 0.163 reads a skill from `$CODEX_HOME/skills/<dir>/SKILL.md` (YAML front
matter `name` and `description`; docs/codex.md, "How Codex finds the skill") and
lists its name and description to every new thread's model; the body is read by
the model from the file when it uses the skill. A running app-server caches the
list: `skills/list` with `forceReload` rescans it.

An agent type codex does not build in (`default`, `explorer`, `worker`) needs an
`[agents.<type>]` table with a `description` in config.toml, or its spawns fail
(`unknown agent_type '<type>'`). The tables are appended after whatever the file
holds, which stays as it was, and the new text is read back as TOML before it is
written, as the hook's entry is (`crw.binding.install`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any

from crw.binding.install import ByHand, Config, joined, reads_back
from crw.codex_config import BUILT_IN_AGENT_TYPES, agent_tables
from crw.engine.config.role_names import ROLES, default_agent_type
from crw.errors import RefusedError

SKILL_NAME = "crw-flow"
SKILL_RESOURCE = f"skills/{SKILL_NAME}/SKILL.md"
"""The skill's file in this package (package data), the text installed."""


def skill_text() -> str:
    """The skill as crw ships it."""
    return resources.files("crw.binding").joinpath(SKILL_RESOURCE).read_text(encoding="utf-8")


def skill_path(home: Path) -> Path:
    """Where the install writes the skill: codex's user skill root, `<home>/skills`."""
    return home / "skills" / SKILL_NAME / "SKILL.md"


def installed_skill(path: Path) -> str | None:
    """The text of the skill file at `path`, None when there is none.

    Raises:
        RefusedError: it is there but cannot be read (nothing is changed).
    """
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as err:
        raise RefusedError(
            f"cannot read {path}: {err}; remove it or make it a readable file, then install again"
        ) from err


def role_agent_types(pairs: Mapping[str, Mapping[str, str]]) -> dict[str, list[str]]:
    """The agent type each of the six roles spawns with, and the roles of each type."""
    types: dict[str, list[str]] = {}
    for role in ROLES:
        kind = (pairs.get(role) or {}).get("agent_type") or default_agent_type(role)
        types.setdefault(kind, []).append(role)
    return types


def missing_agent_types(
    types: Mapping[str, list[str]], config: Mapping[str, Any]
) -> dict[str, list[str]]:
    """The types codex does not know from this config (neither built in nor a table),
    each with its roles."""
    known = set(BUILT_IN_AGENT_TYPES) | agent_tables(config)
    return {kind: roles for kind, roles in types.items() if kind not in known}


def agent_tables_entry(types: Mapping[str, list[str]]) -> str:
    """The tables an install appends, a TOML document of its own."""
    tables = "".join(
        f"[agents.{toml_key(kind)}]\ndescription = {json.dumps(agent_description(roles))}\n"
        for kind, roles in types.items()
    )
    return f"# The agent types of crw flow's roles (crw flow codex install).\n{tables}"


def toml_key(name: str) -> str:
    """`name` as a TOML key: bare when it may be, else quoted."""
    return name if re.fullmatch(r"[A-Za-z0-9_-]+", name) else json.dumps(name)


def agent_description(roles: list[str]) -> str:
    return (
        f"A subagent of a crw flow run ({' and '.join(roles)}): it does the step its message names."
    )


def with_agent_tables(config: Config, types: Mapping[str, list[str]]) -> str:
    """The text with an `[agents.<type>]` table appended for each of `types`.

    Raises:
        ByHand: the tables would not read back (an inline `agents = {...}`, say).
    """
    entry = agent_tables_entry(types)
    text = joined(config.text, f"\n{entry}" if config.text else entry)
    if reads_back(text, lambda data: set(types) <= agent_tables(data)):
        return text
    raise ByHand(
        f"cannot append [agents.<type>] tables to {config.path}: its agents are not written "
        "as tables; add the entries printed on stdout by hand",
        entry,
    )
