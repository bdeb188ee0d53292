"""The web view's app through Starlette's TestClient: what each page shows (what
`crw flow list` and `status` show), who may read and write, the decisions offered
and confirmed, and hostile text shown as text."""

from __future__ import annotations

import html
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from crw.web.app import COOKIE, Ui, build
from crw.web.guard import Guard
from tests.deadlines import LOADED
from tests.web.runs import COMPLETED, HELD, HOSTILE, call_rows, started, write_run

ORIGIN = "http://127.0.0.1:8123"
ENDED = "chain-20261201-000000-aaaa"
HELD_RUN = "chain-20261202-000000-bbbb"


@pytest.fixture
def state(tmp_path: Path) -> Path:
    state = tmp_path / "state"
    write_run(state, ENDED, [started(), *call_rows("explore.1", "explore", end=COMPLETED),
                             {"row": "ended", "status": "completed"}])  # fmt: skip
    write_run(state, HELD_RUN, [started(), *call_rows("explore.1", "explore", end=COMPLETED),
                                *call_rows("build.1", "build", end=HELD)])  # fmt: skip
    return state


@pytest.fixture
def guard() -> Guard:
    made = Guard()
    made.bound("127.0.0.1", 8123)
    return made


def client_of(state: Path, guard: Guard, host: str = "127.0.0.1") -> TestClient:
    app = build(Ui(state, guard, state.parent))
    return TestClient(app, base_url=ORIGIN, client=(host, 40000), backend="trio")


@pytest.fixture
def client(state: Path, guard: Guard) -> Iterator[TestClient]:
    with client_of(state, guard) as made:
        yield made


def text(page: str) -> str:
    """A page's text, tags dropped, entities read."""
    return html.unescape(re.sub(r"<[^>]+>", " ", page))


def test_the_runs_page_lists_each_run_newest_first_with_state_reason_and_calls(
    client: TestClient,
) -> None:
    page = client.get("/")
    assert page.status_code == 200
    shown = " ".join(text(page.text).split())
    assert shown.index(HELD_RUN) < shown.index(ENDED)  # newest first
    assert f"{ENDED} chain ended (completed) 1/1" in shown
    assert f"{HELD_RUN} chain waiting_decision 1/2" in shown
    only = client.get("/", params={"state": "completed"})
    assert ENDED in only.text and HELD_RUN not in only.text
    none = client.get("/", params={"workflow": "other"})
    assert ENDED not in none.text and "No runs match" in none.text


def test_the_run_page_shows_status_calls_its_next_commands_and_its_rows(
    client: TestClient, state: Path
) -> None:
    page = client.get(f"/runs/{HELD_RUN}")
    assert page.status_code == 200
    shown = " ".join(text(page.text).split())
    assert "build.1 build executor held 0 0 0" in shown
    assert "held (host_failure)" in shown  # status's line under the call
    assert f"crw flow answer {HELD_RUN} build.1 --retry --state {state}" in shown
    assert "started app-server backend" in shown  # its rows, as show prints them
    assert f'href="/runs/{HELD_RUN}/calls/build.1"' in page.text
    rows = client.get(f"/runs/{HELD_RUN}", params={"part": "rows"}).text
    assert re.findall(r'data-seq="(\d+)"', rows) == ["1", "2", "3", "4", "5"]
    assert client.get("/runs/nope").status_code == 404


def test_a_call_page_keeps_its_status_line_and_offers_the_calls_own_answers(
    client: TestClient,
) -> None:
    page = client.get(f"/runs/{HELD_RUN}/calls/build.1")
    assert page.status_code == 200
    shown = " ".join(text(page.text).split())
    assert "build.1 build executor held 0 0 0" in shown
    assert "error the subagent vanished" in shown  # the held reason's error
    offered = re.findall(r'data-action="([a-z-]+)" data-call="([^"]*)"', page.text)
    assert offered == [("answer-retry", "build.1"), ("answer-skip", "build.1"),
                       ("answer-abort", "build.1")]  # fmt: skip
    assert client.get(f"/runs/{HELD_RUN}/calls/build.9").status_code == 404


def test_reads_are_answered_only_to_a_loopback_client_naming_the_servers_host(
    state: Path, guard: Guard, client: TestClient
) -> None:
    with client_of(state, guard, host="10.1.2.3") as far:
        assert far.get("/").status_code == 403
    assert client.get("/", headers={"host": "evil.example:8123"}).status_code == 403
    assert client.get("/", headers={"host": "localhost:8123"}).status_code == 200


def test_a_post_without_the_token_or_from_another_origin_is_refused_403(
    client: TestClient, guard: Guard
) -> None:
    """Writes need the server's token and its own origin; reads show the token only
    to a reader who showed it."""
    form = {"verb": "cancel"}
    url = f"/runs/{HELD_RUN}/do"
    assert client.post(url, data=form, headers={"origin": ORIGIN}).status_code == 403
    bad = form | {"token": guard.token[:-1] + "x"}
    assert client.post(url, data=bad, headers={"origin": ORIGIN}).status_code == 403
    ok = form | {"token": guard.token}
    assert client.post(url, data=ok, headers={"origin": "http://evil.example"}).status_code == 403
    assert client.post(url, data=ok).status_code == 403  # neither Origin nor Referer
    assert client.post(url, data=ok, headers={"origin": ORIGIN}).status_code == 200
    by_header = client.post(url, data=form, headers={"x-crw-token": guard.token,
                                                     "referer": f"{ORIGIN}/runs/x"})  # fmt: skip
    assert by_header.status_code == 200


def test_the_token_is_written_into_a_page_only_for_a_reader_who_showed_it(
    state: Path, guard: Guard
) -> None:
    with client_of(state, guard) as fresh:
        assert guard.token not in fresh.get(f"/runs/{HELD_RUN}").text
    with client_of(state, guard) as shown:
        first = shown.get("/", params={"token": guard.token})
        assert first.cookies.get(COOKIE) == guard.token
        assert guard.token in shown.get(f"/runs/{HELD_RUN}").text  # by the cookie now


def test_a_held_run_offers_the_answers_status_lists_and_confirming_shows_the_command(
    client: TestClient, guard: Guard, state: Path
) -> None:
    page = client.get(f"/runs/{HELD_RUN}").text
    offered = re.findall(r'data-action="([a-z-]+)" data-call="([^"]*)"', page)
    # An app-server run's held call takes no restart (as `crw flow answer` says).
    assert offered == [("answer-retry", "build.1"), ("answer-skip", "build.1"),
                       ("answer-abort", "build.1"), ("cancel", "")]  # fmt: skip
    form = {"verb": "answer", "call": "build.1", "choice": "retry", "token": guard.token}
    confirm = client.post(f"/runs/{HELD_RUN}/do", data=form, headers={"origin": ORIGIN})
    assert (
        text(confirm.text).count(
            f"crw flow answer {HELD_RUN} build.1 --retry --state {state} --json"
        )
        == 1
    )
    assert 'name="confirmed" value="yes"' in confirm.text
    ended = client.post(f"/runs/{ENDED}/do", data=form | {"call": "explore.1"},
                        headers={"origin": ORIGIN})  # fmt: skip
    assert ended.status_code == 409  # not offered: nothing is run


def test_a_hostile_node_id_call_id_and_answer_render_as_text(tmp_path: Path, guard: Guard) -> None:
    state = tmp_path / "state"
    call = f"{HOSTILE}.1"
    end = COMPLETED | {"result": {"summary": HOSTILE}, "raw_text": HOSTILE}
    held = {"row": "held", "call": call, "reason": "host_failure", "error": HOSTILE}
    write_run(
        state, "evil-20261201-000000-cccc", [started(), *call_rows(call, HOSTILE, end=end), held]
    )
    with client_of(state, guard) as client:
        page = client.get("/runs/evil-20261201-000000-cccc")
        listed = client.get("/")
    for body in (page.text, listed.text):
        assert "<script>alert" not in body and "<img src=x" not in body
    assert HOSTILE in text(page.text)
    assert "&lt;script&gt;alert(" in page.text and "&lt;img src=x" in page.text


def test_a_confirmed_decision_runs_the_command_and_shows_its_line_code_and_output(
    client: TestClient, guard: Guard, state: Path
) -> None:
    """Cancel on the held run: the page runs `crw flow cancel RUN --state S --json`
    as a process and shows its line, exit code and output as the command gives
    them (this hand-written run's run.json is one the command refuses, exit 1;
    the browser test runs an answer that succeeds)."""
    command = ["crw", "flow", "cancel", HELD_RUN, "--state", str(state), "--json"]
    direct = subprocess.run([sys.executable, "-m", *command], capture_output=True, text=True,
                            cwd=state.parent, timeout=LOADED, check=False)  # fmt: skip
    form = {"verb": "cancel", "token": guard.token, "confirmed": "yes"}
    done = client.post(f"/runs/{HELD_RUN}/do", data=form, headers={"origin": ORIGIN})
    assert done.status_code == 200
    shown = text(done.text)
    assert " ".join(command) in shown
    assert re.search(rf"exit\s+{direct.returncode}\b", shown)
    assert direct.stdout.strip() and direct.stdout.strip() in shown
