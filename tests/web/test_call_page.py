"""The web view's call page (`/runs/RUN/calls/CALL`) through Starlette's TestClient:
what `crw flow call RUN CALL --json` shows of a call, on the demo's finished
session run (a repair and a review round, made by real processes reaped by pid),
and hostile text rendered as text."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from starlette.testclient import TestClient

from crw.cli.read import run_spec
from crw.web import app
from crw.web.app import Ui, build
from crw.web.guard import Guard
from tests.cli.conftest import Crw
from tests.cli.test_call import demo as demo  # the fixture: the demo's ended session run
from tests.web.runs import COMPLETED, HOSTILE, call_rows, started, write_run
from tests.web.test_app import ORIGIN, text

pytestmark = pytest.mark.xdist_group("test_call_page")
"""One xdist worker runs the whole module: its tests share the demo's run."""


def client_of(state: Path) -> TestClient:
    guard = Guard()
    guard.bound("127.0.0.1", 8123)
    return TestClient(build(Ui(state, guard, state.parent)), base_url=ORIGIN,
                      client=("127.0.0.1", 40000), backend="trio")  # fmt: skip


def viewed(crw: Crw, run: str, call: str) -> dict[str, Any]:
    """The call as `crw flow call --json` shows it."""
    done = crw("flow", "call", run, call, "--json", "--state", str(crw.state))
    assert done.code == 0, done.stderr
    return done.json()


def squeezed(page: str) -> str:
    return " ".join(text(page).split())


def test_a_repaired_call_shows_its_turns_packet_answer_schema_repair_and_tokens(
    demo: tuple[Crw, str],
) -> None:
    """The page shows what `crw flow call --json` holds (spec: STEP-14, STEP-17)."""
    crw, run = demo
    view = viewed(crw, run, "build.1")
    with client_of(crw.state) as client:
        page = client.get(f"/runs/{run}/calls/build.1")
    assert page.status_code == 200
    shown, flat = text(page.text), squeezed(page.text)
    assert "build.1 build executor completed" in flat  # the status line, kept
    (attempt,) = view["attempts"]
    first, _ = attempt["steps"]
    assert first["packet_text"].startswith("# Task packet: build.1")
    assert first["packet_text"] in shown and first["packet"] in shown
    for turn in attempt["turns"]:
        assert turn["turn_id"] in shown and turn["outcome"] in flat
    answer = json.dumps(view["answer"]["result"], indent=2, ensure_ascii=False)
    assert answer in shown
    schema = view["schema"]
    assert schema["path"].endswith("schemas/build.json") and schema["path"] in shown
    assert json.dumps(schema["schema"], indent=2, ensure_ascii=False) in shown
    (repair,) = view["repairs"]
    assert repair["invalid_answer"] in shown and all(e in shown for e in repair["errors"])
    tokens = view["tokens"]
    parts = ("input", "cached_input", "output", "reasoning_output", "total")
    assert "call " + " ".join(str(tokens.get(p, 0)) for p in parts) in flat
    assert f"path {view['workspace']['path']} kind directory" in flat
    assert 'href="?transcript=1#transcript"' in page.text  # the host is not asked unless told
    assert "the host cannot give it" not in flat


def test_asked_for_the_transcript_a_gone_host_is_one_line(demo: tuple[Crw, str]) -> None:
    crw, run = demo
    with client_of(crw.state) as client:
        page = client.get(f"/runs/{run}/calls/plan.1", params={"transcript": "1"})
    assert page.status_code == 200
    (line,) = [ln for ln in text(page.text).splitlines() if "the host cannot give it" in ln]
    assert "cannot reach the host" in line


def test_a_host_that_does_not_answer_is_given_up_on_after_the_wait(
    demo: tuple[Crw, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A host that takes the connection and never answers: the page is answered
    after TRANSCRIPT_WAIT with why, not held for the host's own timeout."""
    crw, run = demo
    where = tmp_path / "mute.sock"
    mute = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    mute.bind(str(where))
    mute.listen(1)  # never accepted: a connect succeeds, nothing answers
    monkeypatch.setattr(app, "TRANSCRIPT_WAIT", 0.3)
    monkeypatch.setattr(run_spec, "spec_json", lambda _run: {"host": f"unix:{where}"})
    try:
        with client_of(crw.state) as client:
            page = client.get(f"/runs/{run}/calls/plan.1", params={"transcript": "1"})
    finally:
        mute.close()
    assert page.status_code == 200
    assert "the host cannot give it: the host did not answer in 0.3 s" in squeezed(page.text)


def test_a_review_call_shows_its_verdict_and_crws_verdict_schema(demo: tuple[Crw, str]) -> None:
    crw, run = demo
    with client_of(crw.state) as client:
        page = client.get(f"/runs/{run}/calls/build.2")
    assert page.status_code == 200
    flat = squeezed(page.text)
    assert "review of build.1: reject, 1 findings" in flat
    assert "review:" in flat  # the schema's source


def test_a_hostile_answer_error_and_call_id_render_as_text_on_the_call_page(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    call = f"{HOSTILE}.1"
    end = COMPLETED | {"result": {"summary": HOSTILE}, "raw_text": HOSTILE, "extracted": True}
    run = "evil-20261201-000000-cccc"
    write_run(state, run, [started(), *call_rows(call, HOSTILE, end=end)])
    with client_of(state) as client:
        page = client.get(f"/runs/{run}/calls/{quote(call, safe='')}")
    assert page.status_code == 200
    assert "<script>alert" not in page.text and "<img src=x" not in page.text
    assert json.dumps({"summary": HOSTILE}, indent=2) in text(page.text)  # the answer
    assert "&lt;script&gt;alert(" in page.text
