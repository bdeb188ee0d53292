"""What crw reads of the owner's Codex configuration (`<CODEX_HOME>/config.toml`)."""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from pathlib import Path

DEFAULT_MAX_THREADS = 6


def codex_home(environ: Mapping[str, str]) -> Path:
    return Path(environ.get("CODEX_HOME") or Path.home() / ".codex")


def max_threads(environ: Mapping[str, str]) -> int:
    """agents.max_threads of `<CODEX_HOME>/config.toml`, default 6 (CMD-START-16).
    A file that is missing, unreadable or holds no usable value gives the default."""
    try:
        with open(codex_home(environ) / "config.toml", "rb") as handle:
            config = tomllib.load(handle)
    except (OSError, tomllib.TOMLDecodeError):
        return DEFAULT_MAX_THREADS
    agents = config.get("agents")
    value = agents.get("max_threads") if isinstance(agents, dict) else None
    return value if isinstance(value, int) and value >= 1 else DEFAULT_MAX_THREADS


def session_pool(pool: int, environ: Mapping[str, str]) -> int:
    """A session run's pool: min(pool, agents.max_threads - 1), at least 1: the owner
    keeps a slot for a helper of its own (CMD-START-15)."""
    return max(1, min(pool, max_threads(environ) - 1))
