"""`crw flow status --results` of a completed row that keeps its result as a span
of the message as it was: the same result, and the same lines, as a row that
keeps the result beside the message (a crw before)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from crw.cli.read.status import status_command
from crw.engine.answers import answer, harvest
from crw.engine.run.rundir import RunDir
from crw.host.protocol import AgentMessage, Turn
from crw.journal.log import encode_batch, encode_body
from crw.journal.rows import Prepared, Tokens
from tests.cli.conftest import EXAMPLES, Crw, wait_for_exit

MESSAGE = 'Found:\n```json\n{ "files" :["b.py","a.py"] ,\n "n": {"z":1, "a":2} }\n```\n'
RESULT = {"files": ["b.py", "a.py"], "n": {"a": 2, "z": 1}}
AT = "2026-12-06T00:00:00.000000Z"


def completed_body(call: str, spanned: bool) -> bytes:
    """The completed row the harvest writes of MESSAGE; not `spanned`: as a crw
    before wrote it, the result beside the message."""
    turn = Turn(id="t", status="completed", items=[AgentMessage(id="m", text=MESSAGE)])
    schema = {"type": "object", "required": ["files"]}
    end = harvest.decide(call, schema, turn, Tokens(input=1, output=1, total=2), repaired=False)
    assert end.row is not None and getattr(end.row, "result_span", None) is not None
    row = end.row if spanned else end.row.model_copy(update={"result_span": None})
    return encode_body(row)


def test_status_results_read_a_span_as_the_result_beside_the_message(
    crw: Crw, capsys: pytest.CaptureFixture[str]
) -> None:
    """spec: HARV-6, HARV-7"""
    out = crw.start(str(EXAMPLES / "fix-issue.toml"), "--owner", "o").json()
    run = RunDir(Path(out["run_dir"]))
    wait_for_exit(run.root)  # its host is not there: started, then paused
    with open(run.journal, "ab") as journal:
        seq = 3
        for call, spanned in (("explore.1", True), ("explore.2", False)):
            prepared = encode_body(Prepared(call=call, node="explore", role="explorer"))
            journal.write(encode_batch(seq, AT, [prepared, completed_body(call, spanned)]))
            seq += 2
    lines = run.journal.read_text().splitlines()
    spanned_row, old_row = (json.loads(line) for line in lines[-3::2])
    assert spanned_row["raw_text"] == old_row["raw_text"] == MESSAGE
    assert "result" not in spanned_row and old_row["result"] == RESULT
    capsys.readouterr()
    state = str(crw.state)
    assert status_command(out["run"], state=state, json=True, results=True) == 0
    calls: dict[str, Any] = {c["call"]: c for c in json.loads(capsys.readouterr().out)["calls"]}
    assert calls["explore.1"]["result"] == calls["explore.2"]["result"] == RESULT
    assert json.dumps(calls["explore.1"]["result"]) == json.dumps(calls["explore.2"]["result"])
    assert status_command(out["run"], state=state, json=False, results=True) == 0
    human = capsys.readouterr().out
    shown = f"    answer: {json.dumps(RESULT)}"
    assert human.count(shown) == 2 and answer.digest(RESULT) == spanned_row["result_digest"]
