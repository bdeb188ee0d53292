"""A command's process exits without the interpreter's last collections: they
walked every object the command imported (~50 ms after `next` or `dispatched`
printed their answer, at every step an owner takes)."""

from __future__ import annotations

import gc

import pytest

from crw.cli.entry import run_command
from crw.errors import RefusedError


@pytest.fixture
def frozen(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    monkeypatch.setattr(gc, "freeze", lambda: calls.append(1))
    return calls


def test_a_command_that_ends_freezes_the_heap_before_it_exits(frozen: list[int]) -> None:
    with pytest.raises(SystemExit) as exited:
        run_command(lambda: 3)
    assert exited.value.code == 3 and frozen == [1]


def test_a_command_that_fails_freezes_it_too(frozen: list[int]) -> None:
    def refused() -> int:
        raise RefusedError("no")

    with pytest.raises(SystemExit) as exited:
        run_command(refused)
    assert exited.value.code == 1 and frozen == [1]
