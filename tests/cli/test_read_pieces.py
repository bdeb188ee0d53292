"""`show` and `status --results` read the journal a piece at a time, each piece
shown or replayed and let go, and print what a whole read prints: every row, one
call's rows, the results, a torn tail and a damage with the rows before it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import crw.cli.read.follow as follow
from crw.cli.read.show import show_command
from crw.cli.read.status import status_command
from crw.engine.run.rundir import RunDir
from tests.cli.conftest import EXAMPLES, Crw, wait_for_exit
from tests.cli.test_status import _journal_line

CALLS = 30


def outputs(
    crw: Crw, run_id: str, capsys: pytest.CaptureFixture[str]
) -> dict[str, tuple[int, str, str]]:
    """What show, show --json, show --call and status --results --json print."""
    state = str(crw.state)
    printed: dict[str, tuple[int, str, str]] = {}
    commands: dict[str, Any] = {
        "show": lambda: show_command(run_id, call=None, follow_run=False, state=state, json=False),
        "show_json": lambda: show_command(
            run_id, call=None, follow_run=False, state=state, json=True
        ),
        "show_call": lambda: show_command(
            run_id, call="explore.7", follow_run=False, state=state, json=False
        ),
        "results": lambda: status_command(run_id, state=state, json=True, results=True),
    }
    for name, command in commands.items():
        code = command()
        out, err = capsys.readouterr()
        if name == "results":
            payload = json.loads(out)
            out = json.dumps([payload["corrupt"], payload["calls"]])
        printed[name] = (code, out, err)
    return printed


@pytest.mark.parametrize("ending", ["whole", "torn", "damaged"])
def test_show_and_status_results_read_in_pieces_print_what_a_whole_read_prints(
    crw: Crw, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], ending: str
) -> None:
    out = crw.start(str(EXAMPLES / "fix-issue.toml"), "--owner", "o").json()
    run = RunDir(Path(out["run_dir"]))
    wait_for_exit(run.root)  # its host is not there: started, then paused
    with open(run.journal, "a") as journal:
        seq = 3
        for n in range(1, CALLS + 1):
            call = f"explore.{n}"
            journal.write(_journal_line(seq, "prepared", call=call, node="explore"))
            result = {"files": ["f" * 40] * n}
            journal.write(_journal_line(seq + 1, "completed", call=call, result=result))
            seq += 2
        if ending == "damaged":
            journal.write(_journal_line(seq, "completed", call="x").replace("completed", "c0mp"))
            journal.write(_journal_line(seq + 1, "prepared", call="build.1", node="build"))
        if ending == "torn":
            journal.write(_journal_line(seq, "prepared", call="build.1")[:30])
    capsys.readouterr()
    whole = outputs(crw, out["run"], capsys)
    monkeypatch.setattr(follow, "PIECE", 300)  # a few rows a piece
    assert outputs(crw, out["run"], capsys) == whole
    assert whole["show_call"][1].count("explore.7") == 2
    assert len(whole["show_json"][1].splitlines()) == 2 + 2 * CALLS + (ending == "damaged")
