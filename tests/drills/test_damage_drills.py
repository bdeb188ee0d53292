"""The damage drill with real processes: a run that ended stays ended whatever
happens to its last line.

A session run on a `crw host sim serve` host, its owner process
(`tests.drill.owner`), runs to its end; no process holds it then. One digit of
the `at` of its last line, the ended row, changes, as a stray edit or a bad disk
block would. That line still ends with its newline, so it is damage, not a write
a crash cut: `status` shows the run `corrupt` at that line; `next` and
`resume --detach` refuse with one line and start no process; the journal is kept
byte for byte, no `started` row follows the ended one, and no turn runs again.
Every process is reaped by pid at teardown (the crash drill's `reap`).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from crw.engine.run.locks import held_process_tokens, run_is_live
from crw.engine.run.rundir import RunDir
from tests.deadlines import LOADED
from tests.drill.test_corruption_drill import CorruptDrill, assert_refused
from tests.drill.test_crash_drill import Drill, alive, drill_at, served, wait_until
from tests.processes import processes_under


@pytest.fixture
def drill(tmp_path: Path) -> Iterator[Drill]:
    with served(drill_at(CorruptDrill, tmp_path)) as made:
        yield made


def _change_a_digit_of_the_last_lines_at(run: RunDir) -> int:
    """One digit of the last line's `at` changed; the line's byte offset."""
    data = run.journal.read_bytes()
    offset = data.rindex(b"\n", 0, len(data) - 1) + 1
    at = data.index(b'"at":"', offset) + len(b'"at":"') + 3  # the year's last digit
    digit = data[at] - ord("0")
    run.journal.write_bytes(data[:at] + b"%d" % ((digit + 1) % 10) + data[at + 1 :])
    return offset


@pytest.mark.parametrize(("point", "stop"), [("ended", "at_digit")])
def test_a_completed_run_whose_ended_line_is_damaged_is_corrupt_and_gets_no_process(
    drill: Drill, found: dict[str, Any], point: str, stop: str
) -> None:
    drill.start(crash_after=None)
    rows = drill.finish()
    run = drill.run
    assert run is not None and rows[-1]["row"] == point and rows[-1]["status"] == "completed"
    drill.crw.pids += [r["pid"] for r in rows if r["row"] == "started"]
    turns_before, _ = drill.subagent_turns()
    offset = _change_a_digit_of_the_last_lines_at(run)
    damaged = run.journal.read_bytes()
    state = ("--state", str(drill.crw.state))

    status = drill.crw("flow", "status", run.id, *state, "--json")
    assert status.code == 0, status.stderr
    assert status.json()["state"] == "corrupt"
    corrupt = status.json()["corrupt"]
    assert (corrupt["journal"], corrupt["offset"], corrupt["valid_at"]) == (
        str(run.journal),
        offset,
        None,
    )
    human = drill.crw("flow", "status", run.id, *state)
    assert human.code == 0 and f"run {run.id}: corrupt" in human.stdout

    assert_refused(drill.crw("flow", "next", run.id, *state, "--json"), run, offset)
    assert_refused(drill.crw("flow", "resume", run.id, "--detach", *state), run, offset)
    # A process the commands launched would be there now (a command launches before
    # it answers); the run's own process, which wrote the ended row, is let go.
    ran = [r["pid"] for r in rows if r["row"] == "started"]
    wait_until("the run's own process is gone", lambda: not any(map(alive, ran)), LOADED)
    assert processes_under(Path(run.id)) == []  # no `crw flow _run RUN` process
    assert not run_is_live(run) and held_process_tokens(run) == []
    assert run.journal.read_bytes() == damaged  # no row, no cut: no started row after ended
    turns_after, _ = drill.subagent_turns()
    assert turns_after == turns_before
    found["end"] = "corrupt, refused"
