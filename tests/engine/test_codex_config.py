"""agents.max_threads and a session run's pool."""

from __future__ import annotations

from pathlib import Path

import pytest

from crw.engine.codex_config import max_threads, session_pool


def _home(tmp_path: Path, text: str | None) -> dict[str, str]:
    if text is not None:
        (tmp_path / "config.toml").write_text(text)
    return {"CODEX_HOME": str(tmp_path)}


def test_max_threads_defaults_to_six_without_a_config(tmp_path: Path) -> None:
    """spec: CMD-START-16"""
    assert max_threads(_home(tmp_path, None)) == 6


def test_max_threads_is_read_from_codex_home_config(tmp_path: Path) -> None:
    """spec: CMD-START-16"""
    assert max_threads(_home(tmp_path, "[agents]\nmax_threads = 3\n")) == 3


@pytest.mark.parametrize("text", ["not toml [", "[agents]\nmax_threads = 'x'\n", "agents = 1\n"])
def test_unusable_config_gives_the_default(tmp_path: Path, text: str) -> None:
    assert max_threads(_home(tmp_path, text)) == 6


@pytest.mark.parametrize(
    ("pool", "threads", "expected"), [(4, 6, 4), (8, 6, 5), (4, 3, 2), (4, 1, 1)]
)
def test_session_pool_is_min_of_pool_and_max_threads_less_one(
    tmp_path: Path, pool: int, threads: int, expected: int
) -> None:
    """spec: CMD-START-15"""
    environ = _home(tmp_path, f"[agents]\nmax_threads = {threads}\n")
    assert session_pool(pool, environ) == expected
