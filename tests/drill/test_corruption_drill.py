"""The corruption drill: real processes, a journal damaged in the middle (a
damaged last line: `tests/drills/test_damage_drills.py`).

A session run on a `crw host sim serve` host either runs to its end or is killed
right after its build call completed (no process holds it then, so `next` would
resume it). Then one byte in the middle of its journal changes, as a bad disk
block or a stray edit would. From then on every command sees a corrupt run and no
command changes the file: `status` shows it `corrupt` with the file and the byte;
`next`, `resume`, `dispatched` and the run process itself refuse with one line
saying what, where, and that the file is kept as it is. No turn runs twice.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from crw.engine.run.locks import held_process_tokens
from crw.engine.run.rundir import RunDir
from crw.journal.log import JournalCorruptError
from tests.cli.conftest import Result
from tests.drill.test_crash_drill import CALL, Drill, alive, drill_at, kill, served, wait_until


class CorruptDrill(Drill):
    """A drill whose journal the test damages: its rows are those before the damage
    (the run processes' pids are registered for the reaping before it)."""

    def rows(self) -> list[dict[str, Any]]:
        try:
            return super().rows()
        except JournalCorruptError as err:
            return err.intact.rows


@pytest.fixture
def drill(tmp_path: Path) -> Iterator[Drill]:
    with served(drill_at(CorruptDrill, tmp_path)) as made:
        yield made


def _finished(drill: Drill) -> RunDir:
    drill.start(crash_after=None)
    rows = drill.finish()
    assert rows[-1]["row"] == "ended" and rows[-1]["status"] == "completed"
    assert drill.run is not None
    return drill.run


def _killed_after_build_completed(drill: Drill) -> RunDir:
    """A run whose process died after build.1's completed row; its owner stopped."""
    drill.start(crash_after=f"completed@{CALL}")
    run = drill.run
    assert run is not None and drill.owner is not None
    lock = drill.take_run_lock_once_released()
    try:
        first = next(r for r in drill.rows() if r["row"] == "started")
        wait_until("the killed run process is gone", lambda: not alive(first["pid"]), 5)
        wait_until("its process lock is let go", lambda: held_process_tokens(run) == [], 5)
        drill.pause_owner()
        kill(drill.owner.pid)
        drill.owner.wait(timeout=5)
    finally:
        drill.let_run_lock_go(lock)
    assert drill.rows()[-1]["row"] == "completed" and drill.rows()[-1]["call"] == CALL
    return run


def _damage_the_middle(run: RunDir) -> int:
    """Change one byte inside the middle line's text; the line's byte offset."""
    data = run.journal.read_bytes()
    lines = data.splitlines(keepends=True)
    middle = len(lines) // 2
    offset = sum(map(len, lines[:middle]))
    at = offset + lines[middle].index(b'"row":"') + len(b'"row":"')
    run.journal.write_bytes(data[:at] + bytes([data[at] ^ 0x20]) + data[at + 1 :])
    return offset


def assert_refused(result: Result, run: RunDir, offset: int) -> None:
    """`result` is a refusal of the run whose journal is damaged at `offset`: exit 1
    and one line naming the file, the byte, and that the file is kept."""
    assert result.code == 1, result.stdout + result.stderr
    line = result.error()
    assert line.count("\n") == 1, line
    assert f"journal {run.journal} is damaged at byte {offset}" in line
    assert "corrupt" in line and "kept as it is" in line


@pytest.mark.parametrize("made", [_finished, _killed_after_build_completed])
def test_a_journal_damaged_in_the_middle_is_refused_by_every_command_and_kept(
    drill: Drill, made: Callable[[Drill], RunDir]
) -> None:
    run = made(drill)
    drill.crw.pids += [r["pid"] for r in drill.rows() if r["row"] == "started"]
    turns_before, _ = drill.subagent_turns()
    offset = _damage_the_middle(run)
    damaged = run.journal.read_bytes()
    inbox = sorted(run.inbox.iterdir()) if run.inbox.exists() else []
    state = ("--state", str(drill.crw.state))

    status = drill.crw("flow", "status", run.id, *state, "--json")
    assert status.code == 0, status.stderr
    corrupt = status.json()
    assert corrupt["state"] == "corrupt"
    assert (corrupt["corrupt"]["journal"], corrupt["corrupt"]["offset"]) == (
        str(run.journal),
        offset,
    )
    human = drill.crw("flow", "status", run.id, *state)
    assert human.code == 0 and f"run {run.id}: corrupt" in human.stdout
    assert f"damaged at byte {offset}" in human.stdout and "kept as it is" in human.stdout

    assert_refused(drill.crw("flow", "next", run.id, *state, "--json"), run, offset)
    assert_refused(drill.crw("flow", "resume", run.id, *state), run, offset)
    assert_refused(drill.crw("flow", "resume", run.id, "--detach", *state), run, offset)
    dispatched = ("--agent", "a-1", "--k", "1", "--attempt", "1", "--wait", "0")
    assert_refused(drill.crw("flow", "dispatched", run.id, CALL, *dispatched, *state), run, offset)
    assert_refused(drill.crw("flow", "_run", run.id, *state), run, offset)

    assert run.journal.read_bytes() == damaged
    assert (sorted(run.inbox.iterdir()) if run.inbox.exists() else []) == inbox
    turns_after, _ = drill.subagent_turns()
    assert turns_after == turns_before
    assert all(n == 1 for n in turns_after.values()), turns_after
