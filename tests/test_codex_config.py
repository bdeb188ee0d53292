"""agents.max_threads and a session run's pool."""

from __future__ import annotations

from pathlib import Path

import pytest

from crw.codex_config import max_threads, read_config, session_pool
from tests.oscalls import os_calls


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


def test_a_config_that_is_not_utf8_gives_the_default(tmp_path: Path) -> None:
    """`next` reads agents.max_threads at every call: a config.toml with a byte that
    is not UTF-8 reads as no config, as one that is not TOML does, not a traceback."""
    (tmp_path / "config.toml").write_bytes(b'[agents]\nmax_threads = 3\nmodel = "\xff"\n')
    assert read_config(tmp_path) == {}
    assert max_threads({"CODEX_HOME": str(tmp_path)}) == 6


@pytest.mark.parametrize(
    ("pool", "threads", "expected"), [(4, 6, 4), (8, 6, 5), (4, 3, 2), (4, 1, 1)]
)
def test_session_pool_is_min_of_pool_and_max_threads_less_one(
    tmp_path: Path, pool: int, threads: int, expected: int
) -> None:
    """spec: CMD-START-15"""
    environ = _home(tmp_path, f"[agents]\nmax_threads = {threads}\n")
    assert session_pool(pool, environ) == expected


def test_the_config_is_read_raw_not_through_a_buffered_reader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: CMD-START-16. Every `next` reads agents.max_threads: config.toml is read
    with an open, its reads and a close, no buffered reader (two fstats, an ioctl,
    two lseeks more); the same table as tomllib.load reads."""
    import builtins

    environ = _home(tmp_path, "[agents]\nmax_threads = 3\nname = 'é'\n")
    buffered: list[object] = []
    real_open = builtins.open

    def counted_open(*args: object, **kwargs: object) -> object:
        buffered.append(args[0])
        return real_open(*args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(builtins, "open", counted_open)
    calls = os_calls(monkeypatch, "open", "read", "close")
    assert read_config(tmp_path) == {"agents": {"max_threads": 3, "name": "é"}}
    assert max_threads(environ) == 3
    assert buffered == [] and calls == ["open", "read", "read", "close"] * 2
