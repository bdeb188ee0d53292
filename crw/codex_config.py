"""What crw reads of the owner's Codex configuration (`<CODEX_HOME>/config.toml`)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from crw.rawfile import read_bytes

DEFAULT_MAX_THREADS = 6

BUILT_IN_AGENT_TYPES = ("default", "explorer", "worker")
"""The agent types codex 0.163 knows without an `[agents.<name>]` table."""


def codex_home(environ: Mapping[str, str]) -> Path:
    return Path(environ.get("CODEX_HOME") or Path.home() / ".codex")


def read_config(home: Path) -> dict[str, Any]:
    """`<home>/config.toml` as read; a file that is missing, unreadable, not UTF-8 or
    not TOML reads empty (Codex refuses such a file itself and says so).
    Read raw, as `tomli.load` reads a file (its bytes decoded as UTF-8): every
    `next` reads it, and a buffered reader adds two fstats, an ioctl and two lseeks.
    The TOML parser is imported once there is a file to parse."""
    try:
        text = read_bytes(os.path.join(home, "config.toml")).decode()
    except (OSError, UnicodeDecodeError):
        return {}
    import tomli

    try:
        return tomli.loads(text)
    except tomli.TOMLDecodeError:
        return {}


def max_threads(environ: Mapping[str, str]) -> int:
    """agents.max_threads of `<CODEX_HOME>/config.toml`, default 6 (CMD-START-16).
    A file that is missing, unreadable or holds no usable value gives the default."""
    agents = read_config(codex_home(environ)).get("agents")
    value = agents.get("max_threads") if isinstance(agents, dict) else None
    return value if isinstance(value, int) and value >= 1 else DEFAULT_MAX_THREADS


def multi_agent_v2(config: Mapping[str, Any]) -> bool:
    """features.multi_agent_v2 of a read config.toml (off unless set true)."""
    features = config.get("features")
    return isinstance(features, dict) and features.get("multi_agent_v2") is True


def agent_tables(config: Mapping[str, Any]) -> frozenset[str]:
    """The names of the `[agents.<name>]` tables of a read config.toml: the agent
    types codex knows besides its built-in ones."""
    agents = config.get("agents")
    if not isinstance(agents, dict):
        return frozenset()
    return frozenset(name for name, value in agents.items() if isinstance(value, dict))


def session_pool(pool: int, environ: Mapping[str, str]) -> int:
    """A session run's pool: min(pool, agents.max_threads - 1), at least 1: the owner
    keeps a slot for a helper of its own (CMD-START-15)."""
    return max(1, min(pool, max_threads(environ) - 1))
