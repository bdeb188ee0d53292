"""Test helpers that count what a run does, never time it. No test here."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from crw.host.sim.server import SimHost
from crw.journal.rows import InterruptRequested, RowModel


def names_read(monkeypatch: pytest.MonkeyPatch, owner: object, attribute: str) -> list[str]:
    """Patch `owner.attribute`, a function of one path, to call through and note
    the path's name; the names, in call order, as the test goes on. The spy keeps
    the function's `__name__`, so a count of worker-thread hops by the name of the
    function run still counts it."""
    names: list[str] = []
    real = getattr(owner, attribute)

    @functools.wraps(real)
    def noted(path: Path) -> Any:
        names.append(path.name)
        return real(path)

    monkeypatch.setattr(owner, attribute, noted)
    return names


@dataclass
class TurnsAtCommit:
    """What the simulated host showed of each interrupted turn when each row became
    durable (a journal writer's `after_commit`): `seen` holds (row, call, the
    status of every turn an interrupt_requested row named so far, in order). A row
    written while such a turn is still inProgress was written before it stopped."""

    sim: SimHost
    turns: list[str] = field(default_factory=list)
    seen: list[tuple[str, str | None, tuple[str, ...]]] = field(default_factory=list)

    def after_commit(self, rows: Sequence[RowModel]) -> None:
        for row in rows:
            if isinstance(row, InterruptRequested) and row.turn_id:
                self.turns.append(row.turn_id)
            statuses = tuple(self._status(turn_id) for turn_id in self.turns)
            self.seen.append((str(row.row), getattr(row, "call", None), statuses))

    def of(self, call: str) -> list[tuple[str, tuple[str, ...]]]:
        """`seen` of `call`'s rows from its first interrupt_requested on."""
        return [(kind, statuses) for kind, c, statuses in self.seen if c == call and statuses]

    def _status(self, turn_id: str) -> str:
        return next(
            turn.status
            for thread in self.sim.state.threads.values()
            for turn in thread.turns
            if turn.id == turn_id
        )
