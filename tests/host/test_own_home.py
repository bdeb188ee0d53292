"""A real-codex test runs on an empty HOME (tests/host/conftest.py, `own_home`):
codex's shell snapshot then runs no developer's login shell set-up."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.host.codex_env import codex_env


@pytest.mark.codex
def test_a_codex_test_and_its_codex_children_have_an_empty_home(tmp_path: Path) -> None:
    home = Path(os.environ["HOME"])
    assert home.name.startswith("crw-home-") and not any(home.iterdir())
    assert codex_env(tmp_path)["HOME"] == str(home)


def test_any_other_test_keeps_the_workers_home(own_home: Path | None) -> None:
    assert own_home is None
